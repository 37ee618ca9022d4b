// Topics: one page of the topic list at a time, paged and filtered by the server
// (GET /v1/topics?limit=&after=&contains=), with each shown topic's size and rates
// (GET /v1/cluster/stats?topics=...: only the page's topics). Create a topic.

import { get, part } from "./api.js";
import { act } from "./overview.js";
import { card, field, fmtBytes, fmtNum, fmtRate, h, replace, table } from "./dom.js";

const PAGE = 50;

export function mount(view, ctx) {
  const state = { after: null, previous: [], contains: "" };
  const problems = h("div", { class: "problems" });
  const list = h("div", { id: "topic-list" });
  const counter = h("span", { class: "muted", id: "topic-total" });
  const filter = h("input", { type: "search", placeholder: "Filter by name", "aria-label": "filter topics by name", id: "topic-filter" });
  let debounce = null;
  filter.addEventListener("input", () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => {
      state.contains = filter.value.trim();
      state.after = null;
      state.previous = [];
      ctx.refresh();
    }, 250);
  });
  const prev = h("button", { type: "button", class: "secondary", on: { click: () => { state.after = state.previous.pop() ?? null; ctx.refresh(); } } }, "← Previous");
  const next = h("button", { type: "button", class: "secondary", on: { click: () => { if (state.next) { state.previous.push(state.after); state.after = state.next; ctx.refresh(); } } } }, "Next →");

  const name = h("input", { name: "name", required: true, pattern: "[a-zA-Z0-9._\\-]{1,249}", placeholder: "orders", id: "create-name" });
  const partitions = h("input", { name: "partitions", type: "number", min: 1, max: 10000, value: "3", id: "create-partitions" });
  const factor = h("input", { name: "replication_factor", type: "number", min: 1, placeholder: "default", id: "create-rf" });
  const form = h("form", { class: "inline-form", id: "create-topic" },
    field("Name", name), field("Partitions", partitions), field("Replication factor", factor),
    h("button", { type: "submit" }, "Create topic…"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = { name: name.value.trim(), partitions: Number(partitions.value || 1) };
    if (factor.value) body.replication_factor = Number(factor.value);
    const rf = body.replication_factor ? `replication factor ${body.replication_factor}` : "the default replication factor";
    if (await act(ctx, problems, `Create topic ${body.name} with ${body.partitions} partition(s) and ${rf}?`, "POST", "/v1/topics", body)) {
      form.reset();
    }
  });

  view.append(
    h("h1", {}, "Topics"),
    problems,
    card(null, h("div", { class: "toolbar" }, filter, counter, h("span", { class: "spacer" }), prev, next), list),
    card("Create a topic", form),
  );

  async function refresh() {
    const query = new URLSearchParams({ limit: String(PAGE) });
    if (state.after) query.set("after", state.after);
    if (state.contains) query.set("contains", state.contains);
    const page = await get("/v1/topics?" + query);
    state.next = page.next;
    let stats = null;
    if (ctx.role === "broker" && page.topics.length) {
      try {
        stats = await get("/v1/cluster/stats?topics=" + page.topics.map((t) => part(t.name)).join(","));
      } catch (error) {
        stats = null; // without DESCRIBE CLUSTER: the list without figures
      }
    }
    counter.textContent = `${fmtNum(page.total)} topic(s)` + (state.contains ? ` matching “${state.contains}”` : "");
    prev.disabled = state.previous.length === 0 && state.after === null;
    next.disabled = !page.next;
    const figures = (stats && stats.topics) || {};
    replace(
      list,
      table(
        ["name", "partitions", "RF", "size", "in", "out", "configs"],
        page.topics.map((t) => {
          const f = figures[t.name];
          const rates = f && f.rates;
          return h(
            "tr",
            { "data-topic": t.name },
            h("td", {}, h("a", { href: `#/topics/${part(t.name)}` }, t.name)),
            h("td", { class: "num" }, fmtNum(t.partitions)),
            h("td", { class: "num" }, fmtNum(t.replication_factor)),
            h("td", { class: "num" }, f ? fmtBytes(f.size_bytes) : "—"),
            h("td", { class: "num" }, rates ? fmtRate(rates.produce_records) : "—"),
            h("td", { class: "num" }, rates ? fmtRate(rates.fetch_records) : "—"),
            h("td", { class: "configs" }, Object.entries(t.configs || {}).map(([k, v]) => h("code", {}, `${k}=${v}`))),
          );
        }),
        { empty: state.contains ? "No topic matches." : "No topics yet: create one below." },
      ),
    );
  }

  return { refresh, interval: 5000 };
}
