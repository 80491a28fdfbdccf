"""The service's page in headless Debian chromium, driven by Selenium through chromium-driver.

Used by tests/serve/test_page.py, and as the command that takes the guide's screenshot:

    python tests/serve/browser.py docs/assets/serve_page.png
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

WIDTH, HEIGHT = 1100, 1000


def chrome() -> tuple[Any, str]:
    """A headless chromium driven through chromedriver, or None and the reason there is none."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None, "selenium is not installed (pip install selenium)"
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        return None, "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={WIDTH},{HEIGHT}"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=opts), ""


def train_from_the_page(driver: Any, url: str, token: str, model_name: str, steps: int = 3000,
                        deadline: float = 600) -> str:
    """Open the page, give the token, start a CartPole job from the form; returns the job's id
    once the page shows it done, with its learning curve drawn."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url + "/")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "token-save").click()
    steps_box = driver.find_element(By.ID, "total_timesteps")
    steps_box.clear()
    steps_box.send_keys(str(steps))
    driver.find_element(By.ID, "model_name").send_keys(model_name)
    driver.find_element(By.ID, "seed").clear()
    driver.find_element(By.ID, "seed").send_keys("3")
    driver.find_element(By.ID, "train").click()
    wait = WebDriverWait(driver, deadline, poll_frequency=0.1)
    row = f"//tbody[@id='jobs']/tr[td[2]='{model_name}']"
    wait.until(lambda d: d.find_elements(By.XPATH, f"{row}/td[4][starts-with(., 'done')]"))
    job_id = driver.find_element(By.XPATH, f"{row}/td[1]").text
    curve = driver.find_element(By.ID, "curve")
    wait.until(lambda d: curve.get_attribute("data-job") == job_id and int(curve.get_attribute("data-points")) > 0)
    wait.until(lambda d: d.find_elements(By.XPATH, f"//tbody[@id='models']/tr[td[1]='{model_name}']"))
    return job_id


def screenshot(out: str) -> None:
    """Start a service on a fresh store, train a job from its page, save the page as ``out``."""
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import TOKEN, Server

    driver, why = chrome()
    if driver is None:
        raise SystemExit(f"error: {why}")
    server = Server(Path(tempfile.mkdtemp(prefix="grpo-seq-serve-")) / "store").start()
    try:
        train_from_the_page(driver, server.url, TOKEN, "cartpole", steps=20000)
        driver.save_screenshot(out)
        print(f"wrote {out}")
    finally:
        driver.quit()
        server.stop()


if __name__ == "__main__":
    screenshot(sys.argv[1] if len(sys.argv) > 1 else "docs/assets/serve_page.png")
