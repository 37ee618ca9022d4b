// Consumer groups: the list; a group's members and their assignments, its committed
// offsets and lag per partition, and its total lag over time (since the page opened).

import { ApiError, get, part } from "./api.js";
import { brokersOnly } from "./messages.js";
import { Series, card, errorBox, fmtNum, h, replace, sparkline, stat, table } from "./dom.js";

export function mount(view, ctx, params) {
  if (ctx.role === "controller") return brokersOnly(view, "Consumer groups", params.group ? `#/groups/${part(params.group)}` : "#/groups");
  return params.group ? group(view, params.group) : list(view);
}

function list(view) {
  const box = h("div", { id: "group-list" });
  view.append(h("h1", {}, "Consumer groups"), card(null, box));
  async function refresh() {
    let answer;
    try {
      answer = await get("/v1/groups");
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      replace(box, errorBox(error));
      return;
    }
    replace(box, table(
      ["group", "state", "members", "type"],
      answer.groups.map((g) => h("tr", { "data-group": g.group },
        h("td", {}, h("a", { href: `#/groups/${part(g.group)}` }, g.group)),
        h("td", {}, g.state),
        h("td", { class: "num" }, fmtNum(g.members)),
        h("td", {}, g.type || "consumer"))),
      { empty: "No consumer groups." },
    ));
  }
  return { refresh, interval: 5000 };
}

function group(view, name) {
  const history = new Series(60);
  const problems = h("div", { class: "problems" });
  const summary = h("div", { class: "stats", id: "group-summary" });
  const chart = h("div", { class: "charts" });
  const members = h("div", { id: "members" });
  const offsets = h("div", { id: "lag" });
  view.append(
    h("p", { class: "crumbs" }, h("a", { href: "#/groups" }, "Groups"), " / "),
    h("h1", { id: "group-name" }, name),
    problems, summary, chart,
    card("Lag per partition", offsets),
    card("Members", members),
  );
  async function refresh() {
    const [described, committed] = await Promise.allSettled([
      get(`/v1/groups/${part(name)}`),
      get(`/v1/groups/${part(name)}/offsets`),
    ]);
    for (const r of [described, committed]) {
      if (r.status === "rejected" && !(r.reason instanceof ApiError)) throw r.reason;
    }
    replace(problems, ...[described, committed].filter((r) => r.status === "rejected" && r.reason.code !== "GROUP_ID_NOT_FOUND").map((r) => errorBox(r.reason)));
    const rows = committed.status === "fulfilled" ? committed.value.offsets : [];
    const known = rows.filter((r) => r.lag !== null && r.lag !== undefined);
    const total = known.reduce((n, r) => n + r.lag, 0);
    history.push(committed.status === "fulfilled" ? total : null);
    const d = described.status === "fulfilled" ? described.value : { state: "unknown", members: [] };
    replace(summary,
      stat("state", d.state),
      stat("members", fmtNum(d.members.length)),
      stat("total lag", fmtNum(total), { bad: total > 0, id: "total-lag" }),
      stat("partitions committed", fmtNum(rows.length)));
    replace(chart, h("div", { class: "chart" }, h("div", { class: "stat-label" }, "total lag, since this page opened"), sparkline(history.values, { width: 320, label: "total lag over time" })));
    replace(offsets, table(
      ["topic", "partition", "committed", "high watermark", "lag"],
      rows.map((r) => h("tr", { class: r.lag > 0 ? "under" : null, "data-lag": `${r.topic}/${r.partition}` },
        h("td", {}, h("a", { href: `#/topics/${part(r.topic)}` }, r.topic)),
        h("td", { class: "num" }, String(r.partition)),
        h("td", { class: "num" }, fmtNum(r.offset)),
        h("td", { class: "num" }, fmtNum(r.high_watermark)),
        h("td", { class: "num lag" }, fmtNum(r.lag)))),
      { empty: "No committed offsets." },
    ));
    replace(members, table(
      ["member", "client", "epoch", "subscribed", "assignment"],
      d.members.map((m) => h("tr", {},
        h("td", {}, h("code", {}, m.member_id)),
        h("td", {}, m.client_id || "—"),
        h("td", { class: "num" }, String(m.member_epoch)),
        h("td", {}, (m.topics || []).join(", ")),
        h("td", {}, (m.assignment || []).map((a) => h("div", {}, `${a.topic}: ${a.partitions.join(", ")}`))))),
      { empty: "No members (offsets only)." },
    ));
  }
  return { refresh, interval: 5000 };
}
