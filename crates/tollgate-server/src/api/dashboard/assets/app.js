// The tollgate dashboard: polls /dashboard/data once a second and draws it. Plain JS, no
// libraries. Every value from the server is set as textContent, never as HTML: keys are chosen
// by clients.
"use strict";

const TOKEN_KEY = "tollgate-admin-token";
const POLL_MS = 1000;
const SHOWN = ["allowed", "denied", "shadow_denied", "degraded", "error", "blocked"];

const $ = (selector, root = document) => root.querySelector(selector);

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function color(outcome) {
  return getComputedStyle(document.documentElement).getPropertyValue("--" + outcome).trim() || "#333";
}

function seconds(s) {
  if (s === null || s === undefined) return "-";
  if (s % 86400 === 0) return s / 86400 + " d";
  if (s % 3600 === 0) return s / 3600 + " h";
  if (s % 60 === 0) return s / 60 + " min";
  return s + " s";
}

let polling = null;

async function poll() {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  let response;
  try {
    response = await fetch("/dashboard/data", { headers, cache: "no-store" });
  } catch (err) {
    $("#status").textContent = "server unreachable: " + err.message;
    return;
  }
  if (response.status === 401) {
    stop();
    const form = $("#token-form");
    form.hidden = false;
    $("#main").hidden = true;
    $("#token-error").textContent = token ? "that token was refused" : "";
    $("#status").textContent = "admin token required";
    $("#token").focus();
    return;
  }
  if (!response.ok) {
    $("#status").textContent = "data endpoint answered " + response.status;
    return;
  }
  const data = await response.json();
  $("#token-form").hidden = true;
  $("#main").hidden = false;
  render(data);
  $("#status").textContent = "updated " + new Date(data.now_ms).toLocaleTimeString();
}

function start() {
  if (polling === null) {
    poll();
    polling = setInterval(poll, POLL_MS);
  }
}

function stop() {
  if (polling !== null) clearInterval(polling);
  polling = null;
}

function render(data) {
  renderLegend();
  renderStore(data.store);
  renderReload(data.reload);
  renderPolicies(data);
  renderConfig(data);
}

function renderLegend() {
  const legend = $("#legend");
  if (legend.childElementCount) return;
  for (const outcome of SHOWN) {
    const item = el("span", {}, outcome.replace("_", "-"));
    item.style.setProperty("--swatch", color(outcome));
    legend.append(item);
  }
}

function renderStore(store) {
  $("[data-testid=store-kind]").textContent = store.kind;
  const ready = $("[data-testid=store-ready]");
  ready.textContent = store.ready ? "ready" : "not ready (" + (store.class || "unknown") + ")";
  ready.className = store.ready ? "ok" : "error";
  $("[data-testid=store-error]").textContent = store.error || "";
  const list = $("[data-testid=breakers]");
  list.replaceChildren(...store.breakers.map((b) =>
    el("li", { "data-node": b.node, class: b.open ? "error" : "ok" },
      b.node + ": breaker " + (b.open ? "open" : "closed"))));
}

function renderReload(reload) {
  const node = $("[data-testid=reload]");
  if (!reload) {
    node.textContent = "none since start";
    node.className = "";
    return;
  }
  const when = new Date(reload.at_ms).toLocaleString();
  node.textContent = reload.ok ? "ok at " + when : "rejected at " + when + ": " + reload.error;
  node.className = reload.ok ? "ok" : "error";
}

function policyCard(name) {
  const container = $("#policies");
  for (const card of container.children) {
    if (card.dataset.policy === name) return card;
  }
  const card = el("article", { class: "policy", "data-testid": "policy", "data-policy": name });
  const chartSide = el("div");
  chartSide.append(el("h3", {}, name), el("p", { class: "about" }),
    el("canvas", { "data-testid": "chart", width: "640", height: "170" }));
  const totals = el("div", { class: "totals" });
  for (const outcome of SHOWN) {
    const item = el("span", {}, outcome.replace("_", "-") + " ");
    item.style.setProperty("--swatch", color(outcome));
    item.append(el("strong", { "data-testid": "total-" + outcome }, 0));
    totals.append(item);
  }
  chartSide.append(totals);
  const top = el("div", { class: "top" });
  top.append(el("h3", {}, "Most denied keys"), el("ol", { "data-testid": "top-keys" }));
  card.append(chartSide, top);
  container.append(card);
  return card;
}

function renderPolicies(data) {
  const names = new Set(data.policies.map((p) => p.name));
  for (const card of [...$("#policies").children]) {
    if (!names.has(card.dataset.policy)) card.remove();
  }
  for (const policy of data.policies) {
    const card = policyCard(policy.name);
    const rate = policy.per_period.count + " per " + seconds(policy.per_period.seconds);
    $(".about", card).textContent = policy.algorithm + ", " + rate +
      (policy.shadow ? ", shadow mode" : "");
    for (const outcome of SHOWN) {
      $("[data-testid=total-" + outcome + "]", card).textContent = policy.totals[outcome] || 0;
    }
    drawChart($("canvas", card), data, policy);
    const list = $("[data-testid=top-keys]", card);
    if (policy.top_keys.length === 0) {
      list.replaceChildren(el("li", { class: "none" }, "no denials"));
    } else {
      list.replaceChildren(...policy.top_keys.map((k) => {
        const item = el("li", { "data-testid": "top-key", "data-count": k.count });
        item.append(el("span", { "data-testid": "key" }, k.key),
          el("span", { class: "count", "data-testid": "count" }, k.count + (k.error ? " (±" + k.error + ")" : "")));
        return item;
      }));
    }
  }
}

// A line per outcome over the window, newest at the right. The canvas carries what it drew as
// data attributes (points, the sum of every point) so a test can tell the chart has the traffic.
function drawChart(canvas, data, policy) {
  const ctx = canvas.getContext("2d");
  const width = canvas.width, height = canvas.height;
  const pad = { left: 44, right: 8, top: 8, bottom: 20 };
  const window = data.window_seconds;
  ctx.clearRect(0, 0, width, height);
  let max = 1, sum = 0, points = 0;
  for (const outcome of SHOWN) {
    for (const n of policy.per_second[outcome] || []) {
      max = Math.max(max, n);
      sum += n;
    }
  }
  const plotW = width - pad.left - pad.right, plotH = height - pad.top - pad.bottom;
  const x = (i, len) => pad.left + plotW * (window - (len - 1 - i)) / window;
  const y = (n) => pad.top + plotH * (1 - n / max);
  ctx.strokeStyle = "#cfd8dc";
  ctx.fillStyle = "#607d8b";
  ctx.font = "11px system-ui, sans-serif";
  ctx.lineWidth = 1;
  for (const frac of [0, 0.5, 1]) {
    const value = Math.round(max * frac);
    ctx.beginPath();
    ctx.moveTo(pad.left, y(value));
    ctx.lineTo(width - pad.right, y(value));
    ctx.stroke();
    ctx.fillText(value + "/s", 2, y(value) + 4);
  }
  ctx.fillText("-" + seconds(window), pad.left, height - 5);
  ctx.fillText("now", width - pad.right - 22, height - 5);
  ctx.lineWidth = 2;
  for (const outcome of SHOWN) {
    const series = policy.per_second[outcome] || [];
    if (series.length === 0 || series.every((n) => n === 0)) continue;
    ctx.strokeStyle = color(outcome);
    ctx.beginPath();
    series.forEach((n, i) => {
      const px = x(i, series.length), py = y(n);
      if (i === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
      points++;
    });
    ctx.stroke();
  }
  canvas.dataset.points = points;
  canvas.dataset.sum = sum;
  canvas.dataset.seconds = (policy.per_second.allowed || []).length;
}

function renderConfig(data) {
  const body = $("[data-testid=config-policies] tbody");
  body.replaceChildren(...data.policies.map((p) => {
    const row = el("tr", { "data-policy": p.name });
    for (const cell of [p.name, p.algorithm, p.limit,
      p.per_period.count + " / " + seconds(p.per_period.seconds),
      seconds(p.block_for_seconds), p.failure_mode, p.shadow ? "yes" : "no"]) {
      row.append(el("td", {}, cell));
    }
    return row;
  }));
  $("[data-testid=domains]").textContent =
    data.config.domains.length ? data.config.domains.join(", ") : "none";
  $("[data-testid=descriptors]").textContent = data.config.descriptors;
}

document.addEventListener("DOMContentLoaded", () => {
  $("#token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("#token").value.trim();
    if (token) {
      sessionStorage.setItem(TOKEN_KEY, token);
      $("#token").value = "";
      start();
    }
  });
  start();
});
