"""The page in a real headless browser: it loads with the token, starts a job from its form and
draws the job's learning curve (Debian's chromium through chromium-driver, driven by Selenium)."""

from __future__ import annotations

import pytest

from browser import chrome, train_from_the_page
from conftest import TOKEN


@pytest.fixture(scope="module")
def driver():
    d, why = chrome()
    if d is None:
        pytest.skip(why)
    yield d
    d.quit()


def test_the_page_starts_a_job_and_draws_its_curve(server, driver):
    job_id = train_from_the_page(driver, server.url, TOKEN, "from-the-page")
    job = server.job(job_id)
    assert job["state"] == "done" and job["model_name"] == "from-the-page"
    rows = server.client.get(f"/jobs/{job_id}/metrics", params={"limit": 5000}).json()["rows"]
    drawn = int(driver.find_element("id", "curve").get_attribute("data-points"))
    # every training step's episode return and every evaluation is one point of the curve
    assert drawn == sum(("reward/env_return" in r) + ("eval/return" in r) for r in rows) > 0


def test_the_page_without_the_token_shows_the_refusal(server, driver):
    driver.get(server.url + "/")
    driver.execute_script("sessionStorage.clear()")  # no token kept from another test
    driver.refresh()
    driver.find_element("id", "token").send_keys("wrong")
    driver.find_element("id", "token-save").click()
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30, poll_frequency=0.1).until(
        lambda d: "401: wrong token" in d.find_element("id", "message").text)
