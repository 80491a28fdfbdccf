// The page of grpo-seq serve: the same API as any client, with the token the user gives once.
"use strict";
let token = sessionStorage.getItem("grpo-seq-token") || "";
let selected = null;
const $ = (id) => document.getElementById(id);

async function api(method, path, body) {
  const init = { method, headers: { Authorization: "Bearer " + token } };
  if (body !== undefined) { init.headers["Content-Type"] = "application/json"; init.body = JSON.stringify(body); }
  const res = await fetch(path, init);
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(res.status + ": " + (data.detail || res.statusText));
  return data;
}

function say(text) { $("message").textContent = text || ""; }

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text === null || text === undefined ? "" : text;
  if (cls) td.className = cls;
  return td;
}

function showJobs(jobs) {
  const body = $("jobs");
  body.replaceChildren();
  for (const job of jobs.slice().reverse()) {
    const row = body.insertRow();
    row.className = "job" + (job.id === selected ? " selected" : "");
    row.dataset.id = job.id;
    row.onclick = () => { selected = job.id; refresh(); };
    cell(row, job.id); cell(row, job.model_name); cell(row, job.env_id || job.kind);
    cell(row, job.state + (job.error ? ": " + job.error : ""), "state state-" + job.state);
    const p = job.progress;
    cell(row, p ? p.done + " / " + p.total + " " + p.unit + "s" : "");
    cell(row, job.evaluation ? job.evaluation.return.toFixed(1) : "");
    const td = row.insertCell();
    if (job.state === "running" || job.state === "queued") {
      const b = document.createElement("button");
      b.textContent = "cancel";
      b.onclick = (e) => { e.stopPropagation(); api("DELETE", "/jobs/" + job.id).then(refresh, (err) => say(err.message)); };
      td.appendChild(b);
    }
  }
}

function showModels(models) {
  const body = $("models");
  body.replaceChildren();
  for (const m of models) {
    const row = body.insertRow();
    const s = m.summary || {};
    cell(row, m.name); cell(row, m.kind); cell(row, m.env_id || m.base_model);
    cell(row, s.solved === undefined ? "" : s.solved ? "yes" : "no");
    cell(row, s.best_eval_return === undefined || s.best_eval_return === null ? "" : s.best_eval_return.toFixed(1));
    cell(row, s.env_steps);
  }
}

async function allMetrics(id) {
  let rows = [], offset = 0;
  for (;;) {
    const page = await api("GET", "/jobs/" + id + "/metrics?offset=" + offset + "&limit=5000");
    rows = rows.concat(page.rows);
    if (page.next_offset >= page.total || page.rows.length === 0) return rows;
    offset = page.next_offset;
  }
}

function drawCurve(rows) {
  const canvas = $("curve"), g = canvas.getContext("2d");
  const x = (r) => r["perf/tokens_total"] ?? r["step"];
  const evals = rows.filter((r) => r["eval/return"] !== undefined).map((r) => [x(r), r["eval/return"]]);
  const train = rows.filter((r) => r["reward/env_return"] !== undefined).map((r) => [x(r), r["reward/env_return"]]);
  const lm = rows.filter((r) => r["reward/env_return"] === undefined && r["reward/mean"] !== undefined).map((r) => [x(r), r["reward/mean"]]);
  const series = [[train.concat(lm), "#bbb"], [evals, "#1a56b0"]];
  const all = series.flatMap((s) => s[0]);
  g.clearRect(0, 0, canvas.width, canvas.height);
  canvas.dataset.points = String(all.length);
  if (all.length === 0) return;
  const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs) || 1, y0 = Math.min(0, ...ys), y1 = Math.max(...ys) || 1;
  const px = (v) => 40 + (canvas.width - 50) * (v - x0) / (x1 - x0 || 1);
  const py = (v) => canvas.height - 20 - (canvas.height - 30) * (v - y0) / (y1 - y0 || 1);
  g.fillStyle = "#666"; g.font = "11px sans-serif";
  g.fillText(y1.toFixed(0), 2, py(y1) + 4); g.fillText(y0.toFixed(0), 2, py(y0)); g.fillText(String(x1), canvas.width - 60, canvas.height - 4);
  for (const [points, color] of series) {
    g.strokeStyle = color; g.lineWidth = 2; g.beginPath();
    points.forEach((p, i) => (i ? g.lineTo(px(p[0]), py(p[1])) : g.moveTo(px(p[0]), py(p[1]))));
    g.stroke();
  }
}

async function refresh() {
  if (!token) { say("give the token to see the jobs"); return; }
  try {
    const { jobs } = await api("GET", "/jobs");
    if (!selected && jobs.length) selected = jobs[jobs.length - 1].id;
    showJobs(jobs);
    showModels((await api("GET", "/models")).models);
    if (selected) {
      $("curve-title").textContent = "(job " + selected + ")";
      $("curve").dataset.job = selected;
      drawCurve(await allMetrics(selected));
    }
    say("");
  } catch (err) { say(err.message); }
}

$("token").value = token;
$("token-save").onclick = () => {
  token = $("token").value.trim();
  sessionStorage.setItem("grpo-seq-token", token);
  refresh();
};
$("train-form").onsubmit = async (e) => {
  e.preventDefault();
  const body = { env_name: $("env_name").value, total_timesteps: Number($("total_timesteps").value), seed: Number($("seed").value) };
  if ($("model_name").value.trim()) body.model_name = $("model_name").value.trim();
  try { selected = (await api("POST", "/train", body)).id; refresh(); } catch (err) { say(err.message); }
};
refresh();
setInterval(refresh, 1000);
