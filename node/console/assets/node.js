// The node page: /console/node.json every 2 s (the control API's /v1/id,
// /v1/status, /v1/peers and /v1/owners?mine=1 answers) by Server-Sent
// Events or polling; seeds through POST /v1/seeds, pause and resume
// through POST /v1/pause and /v1/resume.
"use strict";
(() => {
  const { $, el, short, num, ago, colour, assign, rows, live } = micra;
  // kv fills a two-column table: a heading and its value (text or a node)
  const kv = (tbody, pairs) => tbody.replaceChildren(...pairs.filter((p) => p).map(([k, v]) =>
    el("tr", {}, el("th", { text: k }), v instanceof Node ? el("td", {}, v) : el("td", { text: v == null ? "" : String(v) }))));
  const bytes = (n) => (n == null ? "–" : n < 1024 ? n + " B" : n < 1 << 20 ? (n / 1024).toFixed(1) + " KiB" :
    n < 1 << 30 ? (n / 1048576).toFixed(1) + " MiB" : (n / 1073741824).toFixed(2) + " GiB");
  const samples = [[], [], []]; // time (s), pages/s, frontier queued
  let last = null, plot = null, paused = null;

  const chart = () => {
    const box = $("#chart");
    plot = new uPlot({
      width: Math.max(300, box.clientWidth), height: 180,
      series: [{}, { label: "pages/s", stroke: "#2465c8", width: 2 },
        { label: "queued", stroke: "#9a6700", scale: "q" }],
      axes: [{}, { label: "pages/s" }, { side: 1, scale: "q", label: "queued", grid: { show: false } }],
      scales: { x: { time: true } },
    }, samples, box);
    window.addEventListener("resize", () => plot.setSize({ width: Math.max(300, box.clientWidth), height: 180 }));
  };

  // the load its heartbeats advertise (pages taken on over the last day)
  // against the capacity it states
  const capacity = (cp) => {
    const span = el("span", { id: "capacity" });
    if (cp.load == null) {
      span.textContent = `${num(cp.pages_per_day)} pages/day; load not reported yet`;
      return span;
    }
    const pct = cp.load_pct == null ? null : cp.load_pct;
    span.dataset.load = cp.load;
    span.append(`${num(cp.load)} of ${num(cp.pages_per_day)} pages/day` + (pct == null ? "" : ` (${pct.toFixed(1)} %)`));
    if (pct != null) span.append(" ", el("progress", { max: "100", value: String(Math.min(100, pct)), class: "cap" }));
    if (pct != null && pct > 100) span.append(el("span", { class: "warn", text: " over capacity" }));
    return span;
  };
  // when it may fetch and probe: its windows, open or not, and until when
  const windows = (w) => {
    const spans = w.spans.length ? w.spans.join("; ") + ` (${w.location})` : "always (no windows set)";
    const now = w.open ? el("span", { class: "ok", text: "open" }) : el("span", { class: "paused", text: "closed" });
    const until = w.next_close ? ` until ${new Date(w.next_close).toLocaleString()}` :
      w.next_open ? ` until ${new Date(w.next_open).toLocaleString()}: no fetches or probes meanwhile` : "";
    return el("span", { id: "windows" }, now, until + " · " + spans);
  };

  const render = (v) => {
    const id = v.id, s = v.status, at = Date.parse(v.at) / 1000;
    assign((v.peers || []).filter((p) => p.capacity > 0).map((p) => p.peer_id));
    const me = el("span", {}, el("span", { class: "swatch", style: `background:${colour(id.peer_id)}` }), el("code", { text: id.peer_id }));
    kv($("#ident"), [
      ["peer id", me],
      ["role", id.role + (id.capacity ? ` · ${num(id.capacity)} pages/day` : "")],
      ["addresses", el("code", { text: (id.addrs || []).join("\n") })],
      id.crawler_addr && ["crawler address", id.crawler_addr],
      ["policy", id.policy],
      ["hierarchy", el("code", { text: id.hierarchy })],
      ["version", `${id.version.version} (${id.version.go}, ${id.version.platform})`],
      ["data", el("code", { text: id.data_dir })],
      ["running since", `${new Date(s.since).toLocaleString()} (${ago(s.since)})`],
    ]);
    const c = s.crawl, f = s.frontier, o = s.outbox, k = s.sink, h = s.handoff;
    let rate = null;
    if (c && last && at > last.at) rate = (c.pages_fetched - last.pages) / (at - last.at);
    if (c) last = { at, pages: c.pages_fetched };
    const sink = k ? (k.addr ? el("span", {}, el("span", { class: k.connected ? "ok" : "warn", text: k.connected ? "connected " : "not connected " }), el("code", { text: k.addr })) :
      (k.carriers_dir ? "carriers to files: " + k.carriers_dir : el("span", { class: "warn", text: "none announced yet: carriers wait in the outbox" }))) : "–";
    paused = !!s.paused;
    if (c) {
      $("#crawlctl").hidden = false;
      $("#pausebtn").textContent = paused ? "Resume crawling" : "Pause crawling";
      $("#pausebtn").className = paused ? "" : "pause";
    }
    kv($("#progress"), [
      c && ["crawling", el("span", { id: "crawlstate", class: paused ? "paused" : "ok",
        text: paused ? `paused since ${new Date(s.paused_since).toLocaleTimeString()} (${ago(s.paused_since)}): no new fetches, queued URLs kept` : "running" })],
      ["caught up", el("span", { class: s.caught_up ? "ok" : "warn", text: s.caught_up ? "yes" : "no", id: "caughtup" })],
      s.capacity && ["capacity in use", capacity(s.capacity)],
      s.windows && ["time windows", windows(s.windows)],
      ["members", `${num(s.members_live)} live (${num(s.crawlers_live)} crawlers), ${num(s.peers_connected)} connections`],
      ["owns", `${num(s.subnets_owned)} subnets, ${num(s.blocks_owned)} blocks`],
      c && ["pages", el("span", { id: "pages", text: `${num(c.pages_fetched)} fetched, ${num(c.not_modified)} not modified, ${num(c.errors)} errors` })],
      c && ["bytes", bytes(c.bytes_fetched) + " received"],
      c && ["rate", rate == null ? "…" : rate.toFixed(1) + " pages/s"],
      f && ["frontier", el("span", { id: "frontier", text: `${num(f.queued)} queued, ${num(f.seen)} seen, ${num(f.active_hosts)} hosts active, ${num(f.ready_hosts)} ready; ${num(f.revisits_scheduled)} revisits` })],
      o && ["outbox", `${num(o.pending_records)} records, ${num(o.pending_carriers)} carriers pending; ${num(o.carriers_delivered)} delivered, ${num(o.delivery_errors)} errors`],
      ["hand-off", `${num(h.pending)} URLs pending; ${num(h.urls)} URLs in ${num(h.messages)} batches acknowledged, ${num(h.failures)} failures`],
      k && ["sink", sink],
      k && k.last_delivery && ["last delivery", `${ago(k.last_delivery)} ${k.last_ok ? "ok" : "failed: " + k.last_error} (${num(k.delivered)} delivered, ${num(k.failed)} failed)`],
      !c && ["crawler", "this node has no crawler role"],
    ]);
    const errs = Object.entries((c && c.errors_by_reason) || {}).sort((a, b) => b[1] - a[1]);
    rows($("#errors"), errs.length ? errs : [["none", ""]], ([r, n]) => [r, n === "" ? "" : n]);
    const cal = v.calibration || [];
    rows($("#calibration"), cal.length ? cal : [null], (e) => e == null ? ["none yet", "", "", "", "", ""] : [
      ago(e.at), e.kind === "slow_page" ? "slow page" : "released", e.range || String(e.subnet),
      e.mine ? "this node" : short(e.from), e.url || "",
      e.kind === "slow_page" ? `${e.observed_ms.toFixed(0)} / ${e.expected_ms.toFixed(0)} ms` : ""]);
    if (c) {
      samples[0].push(at); samples[1].push(rate); samples[2].push(f ? f.queued : null);
      if (samples[0].length > 300) samples.forEach((a) => a.shift());
      if (!plot) chart(); else plot.setData(samples);
      $("#rate").textContent = rate == null ? "" : `now ${rate.toFixed(1)}`;
    }
    const peers = v.peers || [];
    $("#peercount").textContent = `(${peers.length}, this node first)`;
    rows($("#peers"), peers, (p) => [
      el("span", {}, el("span", { class: "swatch", style: `background:${colour(p.peer_id)}` }), el("code", { text: short(p.peer_id), title: p.peer_id })),
      p.state + (p.sink ? " · sink" : ""), p.connected ? "yes" : "no", p.crawler_addr || "",
      p.position ? `${p.position.lat.toFixed(1)}, ${p.position.lon.toFixed(1)}` : "", p.capacity, p.load == null ? "" : p.load,
      p.state === "self" ? "" : ago(p.last_heard),
    ]);
    const owned = v.owned || [];
    $("#ownedcount").textContent = `(${owned.length})`;
    rows($("#owned"), owned, (o) => [o.range || String(o.subnet), o.country || "", o.org || "", o.mine ? "this node" : short(o.subnet_owner),
      Number(o.owner_rtt_ms.toFixed(1)), o.epoch, (o.blocks || []).map((b) => `${b.block} → ${short(b.owner)}`).join(", "),
      o.decided_at ? ago(o.decided_at) + " by " + short(o.decided_by) : ""]);
    document.body.dataset.ready = "1";
  };

  $("#seedform").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const urls = $("#seeds").value.split("\n").map((s) => s.trim()).filter((s) => s && !s.startsWith("#"));
    if (!urls.length) return;
    $("#seedbtn").disabled = true;
    try {
      const r = await fetch("/v1/seeds", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(urls) });
      const a = await r.json();
      if (a.error) throw new Error(a.error);
      rows($("#seedres"), a.seeds, (s) => [el("code", { text: s.normalized || s.url }),
        el("span", { class: "seed-status " + (s.status === "rejected" ? "bad" : "ok"), text: s.status }),
        s.owner ? "→ " + short(s.owner) : (s.reason || "")]);
      if (r.ok) $("#seeds").value = "";
    } catch (e) {
      rows($("#seedres"), [e.message], (m) => [el("span", { class: "err", text: m })]);
    } finally {
      $("#seedbtn").disabled = false;
    }
  });

  // pause or resume the crawl (POST /v1/pause, /v1/resume); the answer
  // shows at once, the next update confirms it
  $("#pausebtn").addEventListener("click", async () => {
    const btn = $("#pausebtn");
    btn.disabled = true;
    try {
      const r = await fetch(paused ? "/v1/resume" : "/v1/pause", { method: "POST" });
      const a = await r.json();
      if (!r.ok || a.error) throw new Error(a.error || `${r.status}`);
      paused = a.paused;
      btn.textContent = paused ? "Resume crawling" : "Pause crawling";
      btn.className = paused ? "" : "pause";
      $("#pausemsg").className = "muted";
      $("#pausemsg").textContent = (paused ? `paused: fetches in flight finish, ${num(a.queued)} URLs stay queued` : `resumed: ${num(a.queued)} URLs queued`) +
        (a.warning ? " — " + a.warning : "");
      $("#pausemsg").dataset.state = paused ? "paused" : "running";
    } catch (e) {
      $("#pausemsg").className = "err";
      $("#pausemsg").textContent = e.message;
    } finally {
      btn.disabled = false;
    }
  });

  live("node", 2000, render);
})();
