// A topic: its partitions (leader, replicas, ISR, log start, high watermark, size), the
// under-replicated ones highlighted, live charts of its rates; add partitions, edit
// configs, delete it.

import { get, part } from "./api.js";
import { act } from "./overview.js";
import { Series, card, field, fmtBytes, fmtNum, fmtRate, h, replace, sparkline, stat, table } from "./dom.js";

const ROWS = 100; // partitions asked for at once (paged on the server)

export function mount(view, ctx, params) {
  const name = params.topic;
  const state = { after: null, previous: [], next: null, onlyUnder: false };
  const history = { in: new Series(60), out: new Series(60) };
  const problems = h("div", { class: "problems" });
  const summary = h("div", { class: "stats", id: "topic-summary" });
  const charts = h("div", { class: "charts", id: "topic-charts" });
  const partitionsBox = h("div", { id: "partitions" });
  const configsBox = h("div", { id: "configs" });
  const pager = h("div", { class: "toolbar" });
  const only = h("input", { type: "checkbox", id: "only-under" });
  only.addEventListener("change", () => { state.onlyUnder = only.checked; state.after = null; state.previous = []; ctx.refresh(); });

  const count = h("input", { type: "number", min: 1, max: 10000, id: "new-count", "aria-label": "new partition count" });
  const grow = h("form", { class: "inline-form" }, field("Grow to partitions", count), h("button", { type: "submit" }, "Add partitions…"));
  grow.addEventListener("submit", (event) => {
    event.preventDefault();
    act(ctx, problems, `Grow ${name} to ${count.value} partitions? Keys will map to other partitions.`, "POST", `/v1/topics/${part(name)}/partitions`, { count: Number(count.value) });
  });
  const configName = h("input", { id: "config-name", placeholder: "retention.ms", required: true, "aria-label": "config name" });
  const configValue = h("input", { id: "config-value", placeholder: "value (empty: default)", "aria-label": "config value" });
  const edit = h("form", { class: "inline-form" }, field("Config", configName), field("Value", configValue), h("button", { type: "submit" }, "Set config…"));
  edit.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = configValue.value === "" ? null : configValue.value;
    act(ctx, problems, `Set ${configName.value} of ${name} to ${value ?? "its default"}?`, "PUT", `/v1/topics/${part(name)}/configs`, { configs: { [configName.value]: value } });
  });
  const factor = h("input", { type: "number", min: 1, id: "new-factor", "aria-label": "new replication factor" });
  const refactor = h("form", { class: "inline-form" }, field("Replication factor", factor), h("button", { type: "submit" }, "Change replication factor…"));
  refactor.addEventListener("submit", (event) => {
    event.preventDefault();
    act(ctx, problems, `Change the replication factor of ${name} to ${factor.value}? Replicas move by reassignment (progress on the Overview).`, "PATCH", `/v1/topics/${part(name)}`, { replication_factor: Number(factor.value) });
  });
  const remove = h("button", {
    type: "button",
    class: "danger",
    on: { click: async () => { if (await act(ctx, problems, `Delete topic ${name} and every record in it? This cannot be undone.`, "DELETE", `/v1/topics/${part(name)}`)) location.hash = "#/topics"; } },
  }, "Delete topic…");

  view.append(
    h("p", { class: "crumbs" }, h("a", { href: "#/topics" }, "Topics"), " / "),
    h("h1", { id: "topic-name" }, name),
    problems,
    summary,
    charts,
    card("Partitions", h("div", { class: "toolbar" }, h("label", { class: "check" }, only, "under-replicated only"), h("span", { class: "spacer" }), pager), partitionsBox),
    card("Configs", configsBox, edit),
    card("Operations", grow, refactor, h("div", { class: "actions" }, h("a", { href: `#/messages/${part(name)}/0`, class: "button secondary" }, "Browse messages"), remove)),
  );

  async function refresh() {
    const query = new URLSearchParams({ limit: String(ROWS) });
    if (state.after !== null) query.set("after", String(state.after));
    if (state.onlyUnder) query.set("under_replicated", "true");
    const topic = await get(`/v1/topics/${part(name)}/partitions?${query}`);
    state.next = topic.next;
    let stats = null;
    if (ctx.role === "broker") {
      try {
        stats = await get(`/v1/cluster/stats?topics=${part(name)}`);
      } catch {
        stats = null; // without DESCRIBE CLUSTER: the table without sizes and rates
      }
    }
    const figures = stats && stats.topics ? stats.topics[name] : null;
    const sizes = (figures && figures.partitions) || {};
    const cleaning = (figures && figures.compaction) || {};
    const policy = (topic.configs || {})["cleanup.policy"] ?? "delete";
    const compacted = policy.split(",").map((p) => p.trim()).includes("compact");
    const rates = figures ? figures.rates : null;
    history.in.push(rates ? rates.produce_records : null);
    history.out.push(rates ? rates.fetch_records : null);
    replace(
      summary,
      stat("partitions", fmtNum(topic.partition_count)),
      stat("replication factor", fmtNum(topic.replication_factor)),
      stat("under-replicated", fmtNum(topic.under_replicated), { bad: topic.under_replicated > 0, id: "topic-under" }),
      stat("offline", fmtNum(topic.offline), { bad: topic.offline > 0 }),
      stat("size", figures ? fmtBytes(figures.size_bytes) : "—", { id: "topic-size" }),
      stat("cleanup policy", policy || "none", { id: "topic-cleanup" }),
    );
    replace(
      charts,
      h("div", { class: "chart" }, h("div", { class: "stat-label" }, `in: ${rates ? fmtRate(rates.produce_records) : "—"} · ${rates ? fmtRate(rates.produce_bytes, true) : "—"}`), sparkline(history.in.values, { label: "records in per second" })),
      h("div", { class: "chart" }, h("div", { class: "stat-label" }, `out: ${rates ? fmtRate(rates.fetch_records) : "—"} · ${rates ? fmtRate(rates.fetch_bytes, true) : "—"}`), sparkline(history.out.values, { label: "records out per second" })),
    );
    const first = topic.partitions.length ? topic.partitions[0].partition : null;
    const last = topic.partitions.length ? topic.partitions[topic.partitions.length - 1].partition : null;
    replace(
      pager,
      h("span", { class: "muted", id: "partition-range" }, first === null ? `0 of ${fmtNum(topic.total)}` : `${first}–${last} of ${fmtNum(topic.total)}`),
      h("button", { type: "button", class: "secondary small", disabled: state.after === null, on: { click: () => { state.after = state.previous.pop() ?? null; ctx.refresh(); } } }, "←"),
      h("button", { type: "button", class: "secondary small", id: "partitions-next", disabled: state.next === null, on: { click: () => { state.previous.push(state.after); state.after = state.next; ctx.refresh(); } } }, "→"),
    );
    replace(
      partitionsBox,
      table(
        ["partition", "leader", "replicas", "ISR", "log start", "high watermark", "size", ...(compacted ? ["compaction"] : []), ""],
        topic.partitions.map((p) => h(
          "tr",
          { class: p.leader < 0 ? "bad" : p.isr.length < p.replicas.length ? "under" : null, "data-partition": p.partition },
          h("td", { class: "num" }, String(p.partition)),
          h("td", { class: "num" }, p.leader < 0 ? "none" : String(p.leader)),
          h("td", {}, p.replicas.join(", ") + (p.adding_replicas.length ? ` (+${p.adding_replicas.join(", ")})` : "")),
          h("td", {}, p.isr.join(", ")),
          h("td", { class: "num" }, fmtNum(p.log_start_offset)),
          h("td", { class: "num" }, fmtNum(p.high_watermark)),
          h("td", { class: "num" }, sizes[String(p.partition)] === undefined ? "—" : fmtBytes(sizes[String(p.partition)])),
          ...(compacted ? [h("td", { class: "compaction" }, compactionText(cleaning[String(p.partition)]))] : []),
          h("td", {}, h("a", { href: `#/messages/${part(name)}/${p.partition}` }, "messages")),
        )),
        { empty: state.onlyUnder ? "Every partition is fully replicated." : "No partitions." },
      ),
    );
    const configs = Object.entries(topic.configs || {});
    replace(
      configsBox,
      configs.length
        ? h("dl", { class: "configs" }, configs.map(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))]))
        : h("p", { class: "muted" }, "Every config has its default."),
    );
  }

  return { refresh, interval: 5000 };
}

// A compacted partition's cleaner, as its leader last saw it: the dirty share of what it may
// clean, how long the oldest dirty record has waited, and when it last cleaned.
function compactionText(figures) {
  if (!figures) return "—";
  const dirty = `${Math.round(figures.dirty_ratio * 100)}% dirty`;
  const waited = figures.lag_ms > 0 ? ` · oldest ${fmtDuration(figures.lag_ms)}` : "";
  const last = figures.since_pass_ms === null ? "no pass yet" : `cleaned ${fmtDuration(figures.since_pass_ms)} ago`;
  return `${dirty}${waited} · ${last}`;
}

function fmtDuration(ms) {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120_000) return `${Math.round(ms / 1000)} s`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`;
  return `${Math.round(ms / 3_600_000)} h`;
}
