import { el, fill, get, start, table, when } from "../console.js";

const figure = (label, value) => el("div", { class: "figure" }, label, el("b", {}, value));

start(async () => {
  const stats = await get("/v1/timers/stats");
  const pending = stats.levels.reduce((n, l) => n + l.pending, 0) + stats.wheel_pending;
  fill(
    "figures",
    figure("pending", pending),
    figure("in the wheel", stats.wheel_pending),
    figure("next due", stats.next_due_ms === null ? "none" : when(stats.next_due_ms)),
    figure("delivered", stats.delivered),
    figure("cancelled", stats.cancelled),
    figure("lateness p99", `${stats.lateness.p99_ms} ms`),
  );
  fill("levels", table([["level", (l) => l.level], ["pending", (l) => l.pending]], stats.levels.filter((l) => l.pending), "nothing pending on a delay level"));
});
