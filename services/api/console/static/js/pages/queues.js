// Queues: the tenant's queues with pause and resume.
import { api } from "../api.js";
import { h, fill, table, num, badge, act, toast } from "../ui.js";

export async function render(main) {
  const list = h("div", { id: "queues-list" });
  fill(main, h("h1", {}, "Queues"), h("p", { class: "muted" }, "A paused queue keeps accepting jobs; they wait until it is resumed."), list);
  const load = async () => {
    const out = await api("GET", "/v1/queues");
    fill(list, table(["Queue", "Ready#", "Running#", "Delayed#", "Oldest ready", "State", ""], out.queues, (q) => [
      q.name, num(q.depth), num(q.running), num(q.delayed), q.oldest_ready_age,
      h("span", { "data-queue-state": q.name }, badge(q.paused ? "paused" : "active")), toggle(q, load),
    ], "No queues with jobs yet."));
  };
  await load();
  const timer = setInterval(() => load().catch(() => {}), 5000);
  return () => clearInterval(timer);
}

function toggle(q, reload) {
  const verb = q.paused ? "resume" : "pause";
  const b = h("button", { type: "button", class: q.paused ? "" : "secondary", "data-queue-action": q.name }, q.paused ? "Resume" : "Pause");
  b.addEventListener("click", () => act(b, async () => {
    await api("POST", `/v1/queues/${encodeURIComponent(q.name)}/${verb}`);
    toast(`Queue ${q.name} ${verb}d.`);
    await reload();
  }));
  return b;
}
