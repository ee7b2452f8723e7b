// The celery-pause status page: reads GET /status every few seconds, posts the forms.
// Text from the server is only ever set as textContent, never parsed as HTML.
"use strict";

const REFRESH_MS = 3000;
const TOKEN_KEY = "celery-pause-token";

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function headers() {
  const h = { "Content-Type": "application/json" };
  if (token()) h.Authorization = "Bearer " + token();
  return h;
}

function say(text, kind) {
  const el = document.getElementById("message");
  el.textContent = text;
  el.className = "message " + (kind || "");
}

function scope(queues) {
  if (queues === null || queues === undefined) return "all queues";
  return queues.length ? queues.join(", ") : "no queue";
}

function holdScope(h) {
  // Every dimension of a hold, history entry or pause result: tasks, queues, workers, labels.
  const parts = [];
  if (h.tasks) parts.push("tasks " + h.tasks.join(", "));
  if (h.queues || !h.tasks) parts.push((h.tasks ? "in " : "") + scope(h.queues));
  if (h.workers) parts.push("on " + h.workers.join(", "));
  if (h.labels) parts.push("with " + h.labels.join(", "));
  return parts.join(" ");
}

function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  if (!rows.length) {
    const tr = document.createElement("tr");
    const td = document.createElement("td");
    td.colSpan = document.querySelectorAll("#" + id + " th").length;
    td.className = "muted";
    td.textContent = "none";
    tr.append(td);
    body.append(tr);
    return;
  }
  for (const cells of rows) {
    const tr = document.createElement("tr");
    for (const cell of cells) {
      const td = document.createElement("td");
      td.textContent = cell === null || cell === undefined ? "" : String(cell);
      tr.append(td);
    }
    body.append(tr);
  }
}

function limitText(h, usage, parked, turns) {
  // "pause" (and how many of its tasks are parked), or the limit and how much of it is used.
  if (h.rate === undefined && h.concurrency === undefined) {
    if (!parked || !parked.tasks) return "pause";
    const values = (parked.values || []).map((v) => v.value + " " + v.tasks).join(", ");
    return "pause; " + parked.tasks + " parked on the broker" + (values ? " (" + values + ")" : "");
  }
  const parts = [];
  if (h.rate !== undefined && h.rate !== null) parts.push(h.rate + "/s" + (h.cost ? " of " + h.cost : ""));
  if (h.concurrency !== undefined && h.concurrency !== null) {
    const running = usage && usage.running !== null && !h.per ? usage.running + " of " : "at most ";
    parts.push(running + h.concurrency + " running");
  }
  if (usage && usage.booked) parts.push("rate fully used");

  if (h.fair) {
    const weights = (h.weights || []).map((w) => w[0] + "=" + w[1]).join(", ");
    parts.push("fair by " + h.fair + (weights ? " (" + weights + ")" : ""));
  }
  if (turns) parts.push(turns + " waiting for turns on the broker");
  if (h.per) {
    const inUse = usage && usage.partitions !== undefined ? "; " + usage.partitions + " in use" : "";
    parts.push("per " + h.per + inUse);
  }
  const adaptive = usage && usage.adaptive ? adaptiveText(h, usage.adaptive) : "";
  return adaptive + parts.join(", ");
}

function adaptiveText(h, adaptive) {
  // "adaptive: now 37.5/s (last cut 2026-12-06T03:22:10Z: 429 from payments)".
  const level = adaptive.level;
  const now = [];
  if (h.rate !== undefined && h.rate !== null) now.push((h.rate * level).toFixed(1) + "/s");
  if (h.concurrency !== undefined && h.concurrency !== null) {
    now.push(Math.max(1, Math.floor(h.concurrency * level)) + " at once");
  }
  const cut = adaptive.cut ? " (last cut " + when(adaptive.cut.at) + ": " + adaptive.cut.why + ")" : " (never cut)";
  return "adaptive: now " + now.join(", ") + cut + "; up to ";
}

function when(seconds) {
  // Store-clock seconds since the epoch, as ISO 8601 in UTC to the second.
  if (seconds === null || seconds === undefined) return "";
  return new Date(seconds * 1000).toISOString().replace(/\.\d+Z$/, "Z");
}

function render(doc) {
  const state = document.getElementById("state");
  state.textContent = doc.state;
  state.className = "state " + doc.state.toLowerCase();
  document.getElementById("updated").textContent =
    "generation " + doc.generation + " · updated " + when(doc.now) +
    (doc.restored ? " · restored by " + doc.restored.by + " at " + when(doc.restored.at) +
      ": " + doc.restored.lost : "");
  document.getElementById("warnings").textContent =
    (doc.store_warnings || []).map((w) => "Store: WARNING " + w).join(" · ");
  const usage = Object.fromEntries(doc.limits.map((u) => [u.id, u]));
  const parked = Object.fromEntries((doc.parked || []).map((p) => [p.hold, p]));
  const turns = {};
  for (const t of doc.turns || []) turns[t.hold] = (turns[t.hold] || 0) + (t.tasks || 0);
  fill("holds", doc.holds.map((h) => [
    h.source, holdScope(h), limitText(h, usage[h.id], parked[h.id], turns[h.id]), h.paused_by, h.reason,
    when(h.start_at || h.paused_at), when(h.resume_at) || "—", h.beat,
  ]));
  fill("scheduled", doc.scheduled.map((h) => [
    h.source, holdScope(h), h.paused_by, h.reason, when(h.start_at), when(h.resume_at) || "—",
    h.beat, h.id,
  ]));
  fill("ramps", doc.ramps.map((r) => [
    r.scope.map(holdScope).join("; "), r.source, r.by, Math.round(r.progress * 100) + "%",
    r.rate === null ? "unlimited" : r.rate.toFixed(1), r.peak, when(r.end),
  ]));
  fill("windows", doc.windows.map((w) => [
    w.name, holdScope(w), w.schedule, w.duration + "s", w.beat,
    w.in_force ? when(w.in_force.resume_at) : "—", w.next ? when(w.next.start_at) : "—",
    when(w.skipped_until) || "—",
  ]));
  fill("breakers", doc.breakers.map((b) => [
    b.name, b.ramp_until ? b.state + " (ramping until " + when(b.ramp_until) + ")" : b.state,
    scope(b.queues), b.failures + "/" + b.fail_max, when(b.opened_at),
    when(b.next_probe_at), b.last_error,
  ]));
  fill("workers", doc.workers.map((w) => [
    w.hostname, w.state, w.generation, scope(w.paused_queues), w.running.length, w.held,
    w.waiting, (w.readded_queues || []).join(", ") || "—",
    Math.max(0, doc.now - w.seen).toFixed(1) + "s ago",
  ]));
  fill("queues", doc.queues.map((q) => [
    q.name, q.waiting === null ? "?" : q.waiting,
    q.paused ? "paused" : q.partly_paused ? "partly paused" : "flowing",
  ]));
  fill("history", doc.history.map((e) => [
    when(e.at), e.action, e.source, holdScope(e), e.by, e.reason,
  ]));
}

async function refresh() {
  let response;
  try {
    response = await fetch("status", { headers: headers(), cache: "no-store" });
  } catch (err) {
    say("cannot reach the server: " + err, "error");
    return;
  }
  if (response.status === 401) {
    say("Enter the admin token to see the state.", "error");
    return;
  }
  const doc = await response.json();
  if (!response.ok) {
    say(doc.error || "error " + response.status, "error");
    return;
  }
  render(doc);
}

function formBody(form) {
  const body = {};
  for (const el of form.elements) {
    if (!el.name) continue;
    if (el.type === "checkbox") body[el.name] = el.checked;
    else if (el.value.trim() !== "") body[el.name] = el.value.trim();
  }
  if (body.concurrency) body.concurrency = Number(body.concurrency);
  if (body.resume_at) body.resume_at = new Date(body.resume_at).toISOString();
  if (body.start_at) body.start_at = new Date(body.start_at).toISOString();
  return body;
}

async function submit(event, path) {
  event.preventDefault();
  const form = event.target;
  const response = await fetch(path, {
    method: "POST",
    headers: headers(),
    body: JSON.stringify(formBody(form)),
  });
  const doc = await response.json();
  if (!response.ok) {
    say(doc.error || "error " + response.status, "error");
  } else if (path === "throttle") {
    say("Limited " + holdScope(doc.hold) + " to " + limitText(doc.hold, null) +
      " (generation " + doc.generation + ").", "ok");
    form.reset();
  } else if (path === "pause") {
    const what = doc.hold.start_at ? "Scheduled a pause of " : "Paused ";
    const from = doc.hold.start_at ? " from " + when(doc.hold.start_at) : "";
    say(what + holdScope(doc.hold) + from + " (generation " + doc.generation + ").", "ok");
    form.reset();
  } else {
    const rest = doc.remaining.length
      ? " Still held by " + doc.remaining.map((h) => h.source).join(", ") + "."
      : " The queues flow again.";
    const cancelled = doc.cancelled.length ? " Cancelled " + doc.cancelled.length + "." : "";
    const ramp = doc.ramps.length ? " Ramping up until " + when(doc.ramps[0].end) + "." : "";
    say("Removed " + doc.removed.length + " hold(s)." + cancelled + rest + ramp, "ok");
    form.reset();
  }
  await refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("token").value = token();
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
    say("", "");
    refresh();
  });
  document.getElementById("pause-form").addEventListener("submit", (e) => submit(e, "pause"));
  document.getElementById("throttle-form").addEventListener("submit", (e) => submit(e, "throttle"));
  document.getElementById("resume-form").addEventListener("submit", (e) => submit(e, "resume"));
  refresh();
  setInterval(refresh, REFRESH_MS);
});
