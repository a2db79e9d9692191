// Overview: per-queue state, the last hour's throughput and failure rate,
// the dead-letter queue and consumer lag, refreshed every few seconds.
import { api, request, ApiError } from "../api.js";
import { h, fill, table, num, sparkline, badge, errorText } from "../ui.js";

const refreshMs = 3000;

export async function render(main) {
  const queues = h("div", { id: "overview-queues" });
  const stats = h("div", { class: "grid", id: "overview-stats" });
  const lag = h("div", { id: "overview-lag" });
  fill(main, h("h1", {}, "Overview"), stats, h("h2", {}, "Queues"), queues, h("h2", {}, "Consumer lag"), lag);
  let stopped = false;
  const tick = async () => {
    const [q, t, d, m] = await Promise.allSettled([
      api("GET", "/v1/queues"), api("GET", "/v1/stats/throughput"), api("GET", "/v1/dlq?limit=100"), request("GET", "/metrics"),
    ]);
    if (stopped) return;
    fill(queues, q.status === "fulfilled" ? queueTable(q.value.queues) : h("p", { class: "error" }, errorText(q.reason)));
    fill(stats, ...statCards(t, d));
    fill(lag, m.status === "fulfilled" && m.value.ok ? lagTable(await m.value.text()) : h("p", { class: "muted" }, "Metrics are not reachable from here."));
  };
  await tick();
  const timer = setInterval(tick, refreshMs);
  return () => { stopped = true; clearInterval(timer); };
}

function queueTable(qs) {
  return table(["Queue", "Ready#", "Running#", "Delayed#", "Oldest ready", "State"], qs, (q) => [
    h("a", { href: "#/jobs?queue=" + encodeURIComponent(q.name) }, q.name), num(q.depth), num(q.running), num(q.delayed),
    q.oldest_ready_age, badge(q.paused ? "paused" : "active"),
  ], "No queues with jobs yet.");
}

function statCards(t, d) {
  const cards = [];
  if (t.status === "fulfilled") {
    const mins = t.value.minutes;
    const ok = mins.map((m) => m.succeeded), bad = mins.map((m) => m.failed);
    const done = ok.reduce((a, b) => a + b, 0), failed = bad.reduce((a, b) => a + b, 0);
    const rate = mins.map((m) => (m.succeeded + m.failed ? m.failed / (m.succeeded + m.failed) : 0));
    cards.push(card("Finished in the last hour", done + failed, sparkline(ok.map((v, i) => v + bad[i]), "jobs finished per minute, last hour"), "throughput"));
    cards.push(card("Failure rate, last hour", done + failed ? ((100 * failed) / (done + failed)).toFixed(1) + " %" : "—",
      sparkline(rate, "share of jobs dead-lettered per minute, last hour", true), "failure-rate"));
  } else if (!(t.reason instanceof ApiError && t.reason.status === 404)) {
    cards.push(card("Throughput", "?", h("p", { class: "error" }, errorText(t.reason)), "throughput"));
  }
  if (d.status === "fulfilled") {
    const n = d.value.entries.length;
    cards.push(card("Dead letters", d.value.next_cursor ? n + "+" : n, h("a", { href: "#/dlq" }, "Open the dead-letter queue"), "dlq-size"));
  }
  return cards;
}

function card(label, value, extra, id) {
  return h("section", { class: "card stat", id: "stat-" + id }, h("div", { class: "l" }, label), h("div", { class: "n" }, String(value)), extra);
}

/** lagTable sums ferry_kafka_consumer_lag by consumer group from Prometheus text. */
function lagTable(text) {
  const byGroup = new Map();
  for (const line of text.split("\n")) {
    if (!line.startsWith("ferry_kafka_consumer_lag{")) continue;
    const group = (line.match(/group="([^"]*)"/) || [])[1] || "?";
    const v = Number(line.slice(line.lastIndexOf(" ") + 1));
    if (!isNaN(v)) byGroup.set(group, (byGroup.get(group) || 0) + v);
  }
  const rows = [...byGroup.entries()].sort();
  return table(["Consumer group", "Lag (records)#"], rows, ([g, v]) => [g, num(v)], "No consumer lag reported yet.");
}
