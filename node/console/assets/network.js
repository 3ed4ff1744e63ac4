// The network page: a world map (d3-geo's Natural Earth projection of
// world-atlas) with every member crawler at its advertised position, every
// crawled host (the index sink's records) at its place in its crawler's
// colour, and every delegation record this node holds near its country in
// its owner's colour; the paper's figures so far and the probes-per-URL
// curve (uPlot); /console/network.json every 3 s, by Server-Sent Events or
// polling.
"use strict";
(async () => {
  const { $, el, short, num, colour, assign, rows, live } = micra;
  const NS = "http://www.w3.org/2000/svg";
  const svgEl = (tag, attrs) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  };
  const W = 960, H = 500;
  const proj = d3.geoNaturalEarth1().fitExtent([[8, 8], [W - 8, H - 8]], { type: "Sphere" });
  const path = d3.geoPath(proj);
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "world map of crawlers and subnets" });
  svg.append(svgEl("path", { class: "sphere", d: path({ type: "Sphere" }) }));
  const world = await fetch("/console/assets/vendor/countries-110m.json").then((r) => r.json());
  svg.append(svgEl("path", { class: "land", d: path(topojson.feature(world, world.objects.countries)) }));
  svg.append(svgEl("path", { class: "borders", d: path(topojson.mesh(world, world.objects.countries, (a, b) => a !== b)) }));
  const gSubnets = svgEl("g", { id: "subnets" }), gHosts = svgEl("g", { id: "hosts" }), gLinks = svgEl("g"), gCrawlers = svgEl("g", { id: "crawlers-layer" });
  svg.append(gSubnets, gHosts, gLinks, gCrawlers);
  $("#map").append(svg);
  performance.mark("map-drawn");

  const tip = $("#tip");
  const show = (ev, text) => { tip.textContent = text; tip.style.display = "block"; tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px"; };
  const hide = () => { tip.style.display = "none"; gLinks.replaceChildren(); };

  // a subnet's spot: its country's centre, spread by a hash of its id so
  // the subnets of one country do not hide each other
  const spread = (id) => {
    let h = Math.imul(id ^ 0x9e3779b9, 2654435761) >>> 0;
    const a = (h % 360) * Math.PI / 180, r = 4 + ((h >>> 9) % 14);
    return [Math.cos(a) * r, Math.sin(a) * r];
  };
  let crawlerXY = new Map();
  // lines from a dot to its crawler (and, dashed red, to its nearest one
  // when another crawls it)
  const links = (x, y, owner, nearest) => {
    const ls = [];
    const to = crawlerXY.get(owner);
    if (to) ls.push(svgEl("line", { class: "link", x1: x, y1: y, x2: to[0], y2: to[1] }));
    const nt = nearest && nearest !== owner ? crawlerXY.get(nearest) : null;
    if (nt) ls.push(svgEl("line", { class: "link nearest", x1: x, y1: y, x2: nt[0], y2: nt[1] }));
    gLinks.replaceChildren(...ls);
  };
  const fmt = (x, d) => (x == null ? "–" : Number(x).toFixed(d));
  let plot = null;
  const curveData = (c) => [c.map((p) => p.hosts), c.map((p) => p.per_url), c.map((p) => p.window)];

  const render = (v) => {
    const peers = v.peers || [], owners = v.owners || [], places = v.places || [];
    const live = (p) => p.state === "self" || p.state === "alive";
    const crawlers = peers.filter((p) => p.capacity > 0);
    assign(crawlers.map((p) => p.peer_id));
    // per owner: subnets and blocks
    const subnets = new Map(), blocks = new Map();
    for (const o of owners) {
      if (o.owner) subnets.set(o.owner, (subnets.get(o.owner) || 0) + 1);
      for (const b of o.blocks || []) blocks.set(b.owner, (blocks.get(b.owner) || 0) + 1);
    }
    // subnets
    const dots = [];
    let unplaced = 0;
    owners.forEach((o, i) => {
      const p = places[i];
      if (!p) { unplaced++; return; }
      const xy = proj([p.lon, p.lat]);
      if (!xy) { unplaced++; return; }
      const [dx, dy] = spread(o.subnet);
      const c = svgEl("circle", {
        class: "subnet" + (o.owner ? "" : " orphan"), r: 3.5, cx: (xy[0] + dx).toFixed(1), cy: (xy[1] + dy).toFixed(1),
        "data-subnet": o.subnet, "data-owner": o.owner || "", "data-range": o.range || "",
      });
      if (o.owner) { c.setAttribute("fill", colour(o.owner)); c.setAttribute("stroke", colour(o.owner)); }
      c.addEventListener("mouseenter", (ev) => {
        links(c.getAttribute("cx"), c.getAttribute("cy"), o.owner);
        show(ev, `${o.range} ${o.country || ""} ${o.org || ""}\ncrawled by ${o.owner ? short(o.owner) : "nobody live"} (${o.owner_rtt_ms.toFixed(1)} ms, epoch ${o.epoch})`);
      });
      c.addEventListener("mouseleave", hide);
      dots.push(c);
    });
    gSubnets.replaceChildren(...dots);
    // crawled hosts: at their own place (a testnet's world) or their
    // country's centre (spread), in the colour of the crawler that fetched
    // most of their pages
    const hosts = v.hosts || [], fig = v.figures || {};
    const hostDots = [];
    let hostsUnplaced = 0;
    for (const h of hosts) {
      const xy = h.position && proj([h.position.lon, h.position.lat]);
      if (!xy) { hostsUnplaced++; continue; }
      let [x, y] = xy;
      if (h.placed === "country") {
        let k = 0;
        for (let i = 0; i < h.host.length; i++) k = Math.imul(k ^ h.host.charCodeAt(i), 16777619);
        const [dx, dy] = spread(k >>> 0);
        x += dx; y += dy;
      }
      const c = svgEl("circle", {
        class: "host" + (h.at_nearest === false ? " away" : ""), r: 3.2, cx: x.toFixed(1), cy: y.toFixed(1),
        fill: colour(h.crawler), "data-host": h.host, "data-owner": h.crawler, "data-nearest": h.nearest || "",
      });
      c.addEventListener("mouseenter", (ev) => {
        links(c.getAttribute("cx"), c.getAttribute("cy"), h.crawler, h.nearest);
        show(ev, `${h.host} · ${h.pages} pages\ncrawled by ${short(h.crawler)}` + (h.crawlers > 1 ? ` (and ${h.crawlers - 1} more)` : "") +
          (h.at_nearest == null ? "" : h.at_nearest ? " — its nearest crawler" : ` — nearest is ${h.nearest ? short(h.nearest) : "a place no crawler holds"}`) +
          (h.placed === "country" ? "\n(drawn at its country's centre)" : ""));
      });
      c.addEventListener("mouseleave", hide);
      hostDots.push(c);
    }
    gHosts.replaceChildren(...hostDots);
    // crawlers
    crawlerXY = new Map();
    const marks = [];
    for (const p of crawlers) {
      if (!p.position) continue;
      const xy = proj([p.position.lon, p.position.lat]);
      if (!xy) continue;
      crawlerXY.set(p.peer_id, [xy[0].toFixed(1), xy[1].toFixed(1)]); // (as the marker is drawn)
      const c = svgEl("circle", {
        class: live(p) ? "crawler" : "crawler-gone", r: p.state === "self" ? 8 : 6.5, cx: xy[0].toFixed(1), cy: xy[1].toFixed(1),
        fill: colour(p.peer_id), "data-peer": p.peer_id, "data-state": p.state,
      });
      c.addEventListener("mouseenter", (ev) => show(ev, `${p.peer_id}\n${p.state}${p.state === "self" ? " (this node)" : ""} · ${subnets.get(p.peer_id) || 0} subnets · ${p.crawler_addr || ""}`));
      c.addEventListener("mouseleave", hide);
      marks.push(c);
    }
    gCrawlers.replaceChildren(...marks);
    const noPos = crawlers.filter((p) => !p.position).length;
    $("#unplaced").textContent = [noPos ? `crawlers without a position: ${noPos}` : "", unplaced ? `subnets without a country position (not drawn): ${unplaced}` : "",
      hostsUnplaced ? `hosts not placed yet (not drawn): ${hostsUnplaced}` : "", fig.hosts > hosts.length ? `${hosts.length} of ${fig.hosts} hosts listed (most pages first)` : ""].filter(Boolean).join("; ");

    const state = (s) => peers.filter((p) => p.state === s).length;
    const liveCrawlers = crawlers.filter(live);
    const owned = owners.filter((o) => o.owner).length;
    rows($("#figures"), [
      ["members live", peers.filter(live).length],
      ["crawlers live", liveCrawlers.length],
      ["suspected / dead", `${state("suspected")} / ${state("dead")}`],
      ["sink", peers.some((p) => p.sink && live(p)) ? "announced" : "none announced"],
      ["subnets delegated (records held)", owners.length],
      ["… with a live owner", owners.length ? `${owned} (${(100 * owned / owners.length).toFixed(0)} %)` : "–"],
      ["block delegations", [...blocks.values()].reduce((a, b) => a + b, 0)],
      ["probes per decided subnet", owners.length ? (owners.reduce((a, o) => a + (o.probes || []).length, 0) / owners.length).toFixed(2) : "–"],
    ], ([k, v]) => [k, v]);
    $("#figures").querySelectorAll("td:first-child").forEach((td) => td.classList.add("muted"));
    // the paper's table so far: each value cell names its JSON field and
    // holds its raw value (data-key, data-value)
    const cell = (key, text) => { const td = el("span", { text }); td.dataset.key = key; td.dataset.value = fig[key] == null ? "" : String(fig[key]); return td; };
    rows($("#paper"), [
      ["at nearest (optimal %)", cell("optimal_pct", fig.optimal_pct == null ? "– (a testnet's world tells the nearest crawler)" : `${fmt(fig.optimal_pct, 1)} % (${fig.at_nearest} of ${fig.judged} hosts)`)],
      ["probes per URL", cell("probes_per_url", fig.probes_per_url == null ? "–" : `${fmt(fig.probes_per_url, 2)} (${num(fig.probes)} probes, ${num(fig.hosts)} hosts)`)],
      ["makespan so far", cell("makespan_s", fig.first_fetch ? `${fmt(fig.makespan_s, 1)} s` : "–")],
      ["coverage", cell("coverage_pct", fig.coverage_pct == null ? `${num(fig.hosts)} hosts` : `${fmt(fig.coverage_pct, 1)} % of ${num(fig.world_hosts)} hosts`)],
      ["pages at the sink", cell("pages", num(fig.pages))],
      ["overlap", cell("overlap", `${num(fig.overlap)} records (${fmt(fig.overlap_pct, 2)} % of pages)`)],
      ["sink read", cell("cursor", fig.sink ? `${num(fig.records)} records to #${fig.cursor} of ${short(fig.sink)}` : "–")],
    ], ([k, v]) => [k, v]);
    $("#paper").querySelectorAll("td:first-child").forEach((td) => td.classList.add("muted"));
    $("#sinkerr").textContent = (fig.error ? "sink: " + fig.error : "") + (fig.truncated ? " (the tally reached its bound: later hosts and pages not counted)" : "");
    const curve = v.curve || [];
    if (curve.length && window.uPlot) {
      if (!plot) {
        const box = $("#curve");
        plot = new uPlot({
          width: Math.max(300, box.clientWidth), height: 200,
          scales: { x: { time: false } },
          series: [{ label: "hosts crawled" }, { label: "probes/URL so far", stroke: "#2465c8", width: 2 },
            { label: "probes/URL in the step", stroke: "#9a6700", dash: [4, 3] }],
          axes: [{ label: "hosts crawled" }, { label: "probes per URL" }],
        }, curveData(curve), box);
        window.addEventListener("resize", () => plot.setSize({ width: Math.max(300, box.clientWidth), height: 200 }));
      } else plot.setData(curveData(curve));
    }
    $("#curvenote").textContent = curve.length ? "" : "no host crawled yet";
    rows($("#crawlers"), crawlers, (p) => [
      el("span", {}, el("span", { class: "swatch", style: `background:${colour(p.peer_id)}` }), el("code", { text: short(p.peer_id), title: p.peer_id })),
      p.state, subnets.get(p.peer_id) || 0, blocks.get(p.peer_id) || 0, p.load == null ? "" : p.load, p.capacity,
      p.position ? `${p.position.lat.toFixed(1)}, ${p.position.lon.toFixed(1)}` : "",
    ]);
    document.body.dataset.ready = "1";
  };
  live("network", 3000, render);
})().catch((e) => { document.getElementById("conn").textContent = "console error: " + e.message; throw e; });
