// Messages: browse a partition from an offset or a time, newest or oldest first; keys and
// values shown as JSON (pretty-printed) when they parse, else text, else hex; a search box
// over the loaded page; produce a test message.

import { ApiError, get, part } from "./api.js";
import { act } from "./overview.js";
import { card, errorBox, field, fmtTime, h, replace, showBytes, table } from "./dom.js";

export function mount(view, ctx, params) {
  if (ctx.role === "controller") return brokersOnly(view, "Messages", `#/messages/${part(params.topic)}/${part(params.partition)}`);
  if (!params.topic) return chooser(view);
  const topic = params.topic;
  const partition = Number.parseInt(params.partition, 10) || 0;
  const state = { records: [], mode: "newest", loaded: false };
  const problems = h("div", { class: "problems" });
  const info = h("p", { class: "muted", id: "messages-info" });
  const list = h("div", { id: "messages" });

  const partitionInput = h("input", { type: "number", min: 0, value: String(partition), id: "partition", "aria-label": "partition" });
  const mode = h("select", { id: "mode", "aria-label": "start from" },
    h("option", { value: "newest" }, "newest"), h("option", { value: "oldest" }, "oldest"),
    h("option", { value: "offset" }, "offset"), h("option", { value: "time" }, "time"));
  const offset = h("input", { type: "number", min: 0, placeholder: "offset", id: "from-offset", "aria-label": "offset" });
  const time = h("input", { type: "datetime-local", id: "from-time", "aria-label": "time" });
  const count = h("input", { type: "number", min: 1, max: 500, value: "50", id: "count", "aria-label": "how many" });
  const newestFirst = h("input", { type: "checkbox", checked: true, id: "newest-first" });
  const search = h("input", { type: "search", placeholder: "Search the loaded records", id: "search", "aria-label": "search loaded records" });
  search.addEventListener("input", () => render());
  newestFirst.addEventListener("change", () => render());
  const browse = h("form", { class: "inline-form", id: "browse" },
    field("Partition", partitionInput), field("From", mode), offset, time, field("Count", count),
    h("label", { class: "check" }, newestFirst, "newest first"),
    h("button", { type: "submit" }, "Load"));
  browse.addEventListener("submit", (event) => {
    event.preventDefault();
    const wanted = Number.parseInt(partitionInput.value, 10) || 0;
    if (wanted !== partition) {
      location.hash = `#/messages/${part(topic)}/${wanted}`;
      return;
    }
    state.mode = mode.value;
    ctx.refresh();
  });

  const key = h("input", { id: "produce-key", placeholder: "key (optional)", "aria-label": "key" });
  const value = h("textarea", { id: "produce-value", rows: 3, placeholder: '{"hello": "world"}', "aria-label": "value" });
  const headers = h("input", { id: "produce-headers", placeholder: "headers: name=value, …", "aria-label": "headers" });
  const produce = h("form", { class: "stack-form", id: "produce" }, field("Key", key), field("Value", value), field("Headers", headers), h("button", { type: "submit" }, "Produce…"));
  produce.addEventListener("submit", async (event) => {
    event.preventDefault();
    const record = { key: key.value === "" ? null : key.value, value: value.value };
    const named = headers.value.split(",").map((s) => s.trim()).filter(Boolean);
    if (named.length) record.headers = Object.fromEntries(named.map((s) => { const i = s.indexOf("="); return i < 0 ? [s, ""] : [s.slice(0, i), s.slice(i + 1)]; }));
    if (await act(ctx, problems, `Produce a record to ${topic} partition ${partition}?`, "POST", `/v1/topics/${part(topic)}/partitions/${partition}/records`, { records: [record] })) {
      produce.reset();
    }
  });

  view.append(
    h("p", { class: "crumbs" }, h("a", { href: "#/topics" }, "Topics"), " / ", h("a", { href: `#/topics/${part(topic)}` }, topic), " / "),
    h("h1", {}, `Messages · ${topic} / ${partition}`),
    problems,
    card(null, browse, h("div", { class: "toolbar" }, search, info), list),
    card("Produce a test message", produce),
  );

  function render() {
    const needle = search.value.trim().toLowerCase();
    let rows = state.records;
    if (needle) rows = rows.filter((r) => r.searchText.includes(needle));
    if (newestFirst.checked) rows = [...rows].reverse();
    replace(
      list,
      table(
        ["offset", "timestamp", "key", "value", "headers"],
        rows.map((r) => h(
          "tr",
          { "data-offset": r.offset },
          h("td", { class: "num" }, String(r.offset)),
          h("td", { class: "time" }, fmtTime(r.timestamp)),
          h("td", {}, bytesCell(r.key)),
          h("td", { class: "value" }, bytesCell(r.value)),
          h("td", {}, Object.entries(r.headers).map(([name, v]) => h("div", { class: "header" }, h("code", {}, name), ": ", bytesCell(v)))),
        )),
        { empty: state.loaded ? (needle ? "No loaded record matches." : "No records here.") : "Loading…" },
      ),
    );
  }

  async function start() {
    const base = `/v1/topics/${part(topic)}/partitions/${partition}`;
    const wanted = Math.min(Math.max(Number.parseInt(count.value, 10) || 50, 1), 500);
    const [earliest, latest] = await Promise.all([get(`${base}/offsets?at=earliest`), get(`${base}/offsets?at=latest`)]);
    let from;
    if (state.mode === "newest") from = Math.max(earliest.offset, latest.offset - wanted);
    else if (state.mode === "oldest") from = earliest.offset;
    else if (state.mode === "offset") from = Math.min(Math.max(Number.parseInt(offset.value, 10) || 0, earliest.offset), latest.offset);
    else from = (await get(`${base}/offsets?at=${Math.max(Date.parse(time.value) || 0, 0)}`)).offset;
    return { base, from, wanted, earliest: earliest.offset, latest: latest.offset };
  }

  async function refresh() {
    let plan;
    try {
      plan = await start();
      const answer = plan.from >= plan.latest
        ? { records: [] }
        : await get(`${plan.base}/records?offset=${plan.from}&max_records=${plan.wanted}&encoding=base64`);
      state.records = answer.records.map(decode);
      state.loaded = true;
      replace(problems);
      info.textContent = `log start ${plan.earliest} · high watermark ${plan.latest} · ${state.records.length} record(s) loaded from offset ${plan.from}`;
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      replace(problems, errorBox(error));
    }
    render();
  }

  return { refresh, get interval() { return state.mode === "newest" ? 5000 : 0; } };
}

function decode(record) {
  const key = showBytes(record.key);
  const value = showBytes(record.value);
  const headers = Object.fromEntries(Object.entries(record.headers || {}).map(([k, v]) => [k, showBytes(v)]));
  const searchText = [key.text, value.text, ...Object.entries(headers).map(([k, v]) => `${k} ${v.text}`)].join("\n").toLowerCase();
  return { offset: record.offset, timestamp: record.timestamp, key, value, headers, searchText };
}

function bytesCell(shown) {
  if (shown.kind === "null") return h("span", { class: "muted" }, "null");
  if (shown.kind === "json") return h("pre", { class: "json" }, shown.text);
  if (shown.kind === "hex") return h("code", { class: "hex", title: "bytes (hex)" }, shown.text);
  return h("span", { class: "text" }, shown.text);
}

function chooser(view) {
  const list = h("div", { id: "topic-choices" });
  view.append(h("h1", {}, "Messages"), card("Choose a topic", list));
  async function refresh() {
    const page = await get("/v1/topics?limit=100");
    replace(list, page.topics.length
      ? h("ul", { class: "choices" }, page.topics.map((t) => h("li", {}, h("a", { href: `#/messages/${part(t.name)}/0` }, t.name), h("span", { class: "muted" }, ` ${t.partitions} partition(s)`))))
      : h("p", { class: "muted" }, "No topics yet."),
      page.next ? h("p", { class: "muted" }, "Showing the first 100: open others from the Topics page.") : null);
  }
  return { refresh, interval: 0 };
}

// On a controller: pages that need brokers link to the brokers' consoles.
export function brokersOnly(view, title, hash) {
  const links = h("ul", { class: "choices", id: "broker-links" });
  view.append(
    h("h1", {}, title),
    card(null,
      h("p", { class: "note" }, "This console is served by a controller. Controllers keep the cluster's metadata; records and consumer groups are served by brokers. Open this page on a broker:"),
      links),
  );
  async function refresh() {
    const cluster = await get("/v1/cluster");
    replace(links, cluster.brokers.filter((b) => !b.fenced).map((b) => h("li", {}, h("a", { href: `${b.url}/ui/${hash}` }, `broker ${b.id} · ${b.url}`))));
  }
  return { refresh, interval: 0 };
}
