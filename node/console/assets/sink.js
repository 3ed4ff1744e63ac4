// The sink page: /console/sink.json (the status document, the ingest over
// recent windows, the open streams) by Server-Sent Events or polling,
// every 2 s; the search box asks GET /v1/search.
"use strict";
(() => {
  const { $, el, short, num, ago, colour, assign, rows, live } = micra;
  const kv = (tbody, pairs) => tbody.replaceChildren(...pairs.filter((p) => p).map(([k, v]) =>
    el("tr", {}, el("th", { text: k }), v instanceof Node ? el("td", {}, v) : el("td", { text: v == null ? "" : String(v) }))));
  const pct = (a, b) => (b > 0 ? (100 * a / b).toFixed(1) + " %" : "–");
  const span = (s) => (s < 60 ? s + " s" : s < 3600 ? s / 60 + " min" : s / 3600 + " h");
  // a rate with two significant digits below 10 (0.0067, 2.4), whole above
  const rateNum = (x) => (x === 0 ? 0 : x < 10 ? Number(x.toPrecision(2)) : Math.round(x));
  const samples = [[], [], []]; // time (s), records/s, index backlog
  let last = null, plot = null;

  const chart = () => {
    const box = $("#chart");
    plot = new uPlot({
      width: Math.max(300, box.clientWidth), height: 180,
      series: [{}, { label: "records/s", stroke: "#2465c8", width: 2 },
        { label: "index backlog", stroke: "#9a6700", scale: "b" }],
      axes: [{}, { label: "records/s" }, { side: 1, scale: "b", label: "backlog", grid: { show: false } }],
      scales: { x: { time: true } },
    }, samples, box);
    window.addEventListener("resize", () => plot.setSize({ width: Math.max(300, box.clientWidth), height: 180 }));
  };

  const render = (v) => {
    const c = v.counts, at = Date.parse(v.at) / 1000;
    rows($("#ingest"), v.ingest || [], (r) => [span(r.window_s), r.records, rateNum(r.per_s)]);
    kv($("#log"), [
      ["head", el("span", { id: "head", text: num(v.head) })],
      ["start", num(v.start) + (v.start > 1 ? " (older records dropped by retention)" : "")],
      ["records", num(c.records)],
      ["pages", num(c.pages)],
      ["carriers", `${num(c.carriers)} committed, ${num(c.duplicates)} delivered again, ${num(c.rejected)} refused`],
      ["overlap", `${num(c.overlap)} records (${pct(c.overlap, c.records)}) of pages another crawler delivered before`],
      v.error && ["error", el("span", { class: "err", text: v.error })],
    ]);
    let rate = null;
    if (last && at > last.at) rate = (v.head - last.head) / (at - last.at);
    last = { at, head: v.head };
    samples[0].push(at); samples[1].push(rate); samples[2].push(v.index_backlog == null ? null : v.index_backlog);
    if (samples[0].length > 300) samples.forEach((a) => a.shift());
    if (plot) plot.setData(samples); else if (samples[0].length > 1) chart(); // (one point draws no line)
    $("#rate").textContent = rate == null ? "" : `now ${rate.toFixed(1)}`;
    if (v.search_indexed != null) {
      const bar = el("progress", { max: String(Math.max(1, v.head)), value: String(v.search_indexed) });
      kv($("#index"), [
        ["indexed", el("span", { id: "indexed", text: `${num(v.search_indexed)} of ${num(v.head)} (${pct(v.search_indexed, v.head)})` })],
        ["progress", bar],
        ["backlog", `${num(v.index_backlog)} records`],
      ]);
    } else {
      kv($("#index"), [["index", "this sink runs no full-text index"]]);
      $("#searchbtn").disabled = true;
    }
    const cr = v.crawlers || [];
    assign(cr.map((x) => x.crawler));
    $("#crawlercount").textContent = `(${cr.length})`;
    rows($("#crawlers"), cr, (x) => [
      el("span", {}, el("span", { class: "swatch", style: `background:${colour(x.crawler)}` }), el("code", { text: short(x.crawler), title: x.crawler })),
      x.carriers, x.records, pct(x.records, c.records), x.overlap, ago(x.last_seen)]);
    const rd = v.readers || [];
    $("#readercount").textContent = `(${rd.length} open${v.readers_unlisted ? `, ${v.readers_unlisted} more unlisted` : ""})`;
    rows($("#readers"), rd, (r) => [r.id, r.kind + (r.follow ? " · follow" : ""), el("code", { text: short(r.remote), title: r.remote }),
      r.filter || "", ago(r.since), r.from, r.cursor, Math.max(0, v.head - r.cursor), r.sent, r.last_sent ? ago(r.last_sent) : "never"]);
    document.body.dataset.ready = "1";
  };

  $("#searchform").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const q = $("#q").value.trim();
    if (!q) return;
    const p = new URLSearchParams({ q, limit: "20" });
    if ($("#host").value.trim()) p.set("host", $("#host").value.trim());
    $("#searchbtn").disabled = true;
    try {
      const r = await fetch("/v1/search?" + p, { headers: { Accept: "application/json" }, cache: "no-store" });
      if (!r.ok) throw new Error((await r.text()).trim() || `search: ${r.status}`);
      const a = await r.json();
      $("#searchinfo").textContent = `${num(a.total)} pages match "${q}" (${a.took_ms.toFixed(1)} ms; index at record ${num(a.indexed)})`;
      rows($("#hits"), a.hits || [], (h) => [
        el("span", { class: "hit" }, el("a", { href: h.url, rel: "noreferrer noopener", target: "_blank", text: h.title || h.url }), el("br"), el("code", { class: "muted", text: h.url })),
        h.lang || "", Number(h.score.toFixed(3)), h.seq]);
    } catch (e) {
      $("#searchinfo").textContent = "";
      rows($("#hits"), [e.message], (m) => [el("span", { class: "err", text: m })]);
    } finally {
      $("#searchbtn").disabled = false;
    }
  });

  live("sink", 2000, render);
})();
