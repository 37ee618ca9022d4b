// Overview: the cluster, its controller quorum, its brokers (state, rack, URL and Kafka
// address, leaders, replicas, disk, rates), partition health, moves in progress.

import { AuthRequired, call, get, part } from "./api.js";
import { card, confirmAction, errorBox, fmtBytes, fmtNum, fmtRate, h, replace, stat, table } from "./dom.js";

export function mount(view, ctx) {
  const summary = h("div", { class: "stats", id: "summary" });
  const quorum = h("div", { id: "quorum" });
  const brokers = h("div", { id: "brokers" });
  const moves = h("div", { id: "moves" });
  const problems = h("div", { class: "problems" });
  const rebalance = h("button", {
    type: "button",
    on: { click: () => act(ctx, problems, "Rebalance the cluster: move replicas so every broker holds about as many?", "POST", "/v1/cluster/rebalance", {}) },
  }, "Rebalance…");
  view.append(
    h("h1", {}, "Cluster"),
    problems,
    summary,
    card("Brokers", brokers),
    card("Controller quorum", quorum),
    card("Reassignments", h("div", { class: "actions" }, rebalance), moves),
  );

  async function refresh() {
    const [cluster, quorumAnswer, brokerList, stats, reassignments] = await Promise.allSettled([
      get("/v1/cluster"),
      get("/v1/quorum"),
      get("/v1/brokers"),
      get("/v1/cluster/stats"),
      get("/v1/reassignments"),
    ]);
    rethrowAuth([cluster, quorumAnswer, brokerList, stats, reassignments]);
    const figures = ok(stats);
    const info = ok(cluster);
    replace(
      summary,
      stat("cluster id", info ? info.cluster_id : "—", { id: "cluster-id" }),
      stat("active controller", info && info.controller.leader_id !== null ? `${info.controller.leader_id} (term ${info.controller.term})` : "none", { bad: info && info.controller.leader_id === null, id: "controller" }),
      stat("brokers", info ? info.brokers.filter((b) => !b.fenced).length + " / " + info.brokers.length : "—", { id: "broker-count" }),
      stat("under-replicated partitions", figures ? fmtNum(figures.under_replicated_partitions) : "—", { bad: figures && figures.under_replicated_partitions > 0, id: "under-replicated" }),
      stat("offline partitions", figures ? fmtNum(figures.offline_partitions) : "—", { bad: figures && figures.offline_partitions > 0, id: "offline" }),
      stat("produce", figures && figures.rates ? `${fmtRate(figures.rates.produce_records)} · ${fmtRate(figures.rates.produce_bytes, true)}` : "—", { id: "produce-rate" }),
      stat("fetch", figures && figures.rates ? `${fmtRate(figures.rates.fetch_records)} · ${fmtRate(figures.rates.fetch_bytes, true)}` : "—", { id: "fetch-rate" }),
    );
    renderBrokers(ctx, brokers, problems, ok(brokerList), info, figures, [brokerList, cluster]);
    renderQuorum(quorum, quorumAnswer);
    renderMoves(moves, reassignments);
    if (ctx.role === "controller") {
      replace(problems, h("p", { class: "note" }, "This is a controller: it shows the cluster's metadata. Disk use, rates, messages and groups are known to brokers: open a broker's console from the table."));
    }
  }

  return { refresh, interval: 5000 };
}

function ok(settled) {
  return settled.status === "fulfilled" ? settled.value : null;
}

export function rethrowAuth(results) {
  for (const r of results) {
    if (r.status === "rejected" && r.reason instanceof AuthRequired) throw r.reason;
  }
}

function renderBrokers(ctx, into, problems, listed, info, figures, settled) {
  const rows = listed ? listed.brokers : info ? info.brokers.map((b) => ({ ...b, state: b.fenced ? "fenced" : "active" })) : [];
  if (!rows.length && settled.every((s) => s.status === "rejected")) {
    replace(into, errorBox(settled[0].reason));
    return;
  }
  const byId = new Map(((figures && figures.brokers) || []).map((b) => [b.id, b]));
  replace(
    into,
    table(
      ["id", "state", "rack", "URL", "Kafka", "leaders", "replicas", "disk", "produce", "fetch", ""],
      rows.map((b) => {
        const f = byId.get(b.id) || {};
        const rates = f.rates || null;
        return h(
          "tr",
          { "data-broker": b.id, class: b.state !== "active" ? "warn" : null },
          h("td", {}, String(b.id)),
          h("td", {}, b.state || (b.fenced ? "fenced" : "active")),
          h("td", {}, b.rack || "—"),
          h("td", {}, h("a", { href: b.url + "/ui/", title: "this broker's console" }, b.url)),
          h("td", { class: "kafka" }, b.kafka || "—"),
          h("td", { class: "num" }, fmtNum(b.leaders ?? f.leaders)),
          h("td", { class: "num" }, fmtNum(b.replicas ?? f.replicas)),
          h("td", { class: "num" }, f.answered ? fmtBytes(f.disk_bytes) : "—"),
          h("td", { class: "num" }, rates ? fmtRate(rates.produce_bytes, true) : "—"),
          h("td", { class: "num" }, rates ? fmtRate(rates.fetch_bytes, true) : "—"),
          h("td", {}, b.state === "active" ? h("button", {
            type: "button",
            class: "small",
            on: { click: () => act(ctx, problems, `Drain broker ${b.id}: move every replica off it?`, "POST", `/v1/brokers/${part(b.id)}/drain`) },
          }, "Drain…") : b.draining ? h("button", {
            type: "button",
            class: "small secondary",
            on: { click: () => act(ctx, problems, `Stop draining broker ${b.id}: let it take replicas again?`, "DELETE", `/v1/brokers/${part(b.id)}/drain`) },
          }, "Stop draining…") : null),
        );
      }),
      { empty: "No brokers registered." },
    ),
  );
}

function renderQuorum(into, settled) {
  if (settled.status === "rejected") {
    replace(into, errorBox(settled.reason));
    return;
  }
  const q = settled.value;
  replace(
    into,
    h("p", { class: "muted" }, `leader ${q.leader_id ?? "none"} · term ${q.term} · commit index ${fmtNum(q.commit_index)} · metadata offset ${fmtNum(q.metadata_offset)}`),
    table(
      ["voter", "Raft address", "state", "commit lag", "URL"],
      q.voters.map((v) => h(
        "tr",
        { class: v.state === "unreachable" ? "bad" : null },
        h("td", {}, String(v.id) + (v.id === q.leader_id ? " ★" : "")),
        h("td", {}, v.address),
        h("td", {}, v.state),
        h("td", { class: "num" }, v.lag == null ? "—" : fmtNum(v.lag)),
        h("td", {}, v.url ? h("a", { href: v.url + "/ui/" }, v.url) : "—"),
      )),
    ),
  );
}

function renderMoves(into, settled) {
  if (settled.status === "rejected") {
    replace(into, errorBox(settled.reason));
    return;
  }
  const moving = settled.value.reassignments;
  replace(
    into,
    h("p", { class: moving.length ? "warn-text" : "muted" }, moving.length ? `${moving.length} partition(s) moving` : "No reassignment in progress."),
    moving.length ? table(
      ["topic", "partition", "replicas", "adding", "removing", "ISR", "caught up"],
      moving.slice(0, 200).map((m) => h(
        "tr", {},
        h("td", {}, h("a", { href: `#/topics/${part(m.topic)}` }, m.topic)),
        h("td", { class: "num" }, String(m.partition)),
        h("td", {}, m.replicas.join(", ")),
        h("td", {}, m.adding.join(", ")),
        h("td", {}, m.removing.join(", ")),
        h("td", {}, m.isr.join(", ")),
        h("td", {}, `${m.adding.filter((r) => m.isr.includes(r)).length} / ${m.adding.length}`),
      )),
    ) : null,
  );
}

export async function act(ctx, problems, question, method, path, body) {
  if (!(await confirmAction(question))) return false;
  try {
    await call(method, path, body);
    replace(problems, h("p", { class: "note ok" }, "Done: " + question.replace(/\?$/, "").replace(/…$/, "")));
  } catch (error) {
    if (error instanceof AuthRequired) {
      await ctx.refresh(); // shows the login form
      return false;
    }
    replace(problems, errorBox(error));
    return false;
  }
  await ctx.refresh();
  return true;
}
