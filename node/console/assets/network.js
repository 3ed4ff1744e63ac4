// The network page: a world map (d3-geo's Natural Earth projection of
// world-atlas) with every member crawler at its advertised position and
// every delegation record this node holds drawn in its owner's colour;
// /console/network.json every 3 s, by Server-Sent Events or polling.
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
  const gSubnets = svgEl("g", { id: "subnets" }), gLinks = svgEl("g"), gCrawlers = svgEl("g", { id: "crawlers-layer" });
  svg.append(gSubnets, gLinks, gCrawlers);
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
      if (o.owner) c.setAttribute("fill", colour(o.owner));
      c.addEventListener("mouseenter", (ev) => {
        const to = crawlerXY.get(o.owner);
        if (to) gLinks.replaceChildren(svgEl("line", { class: "link", x1: c.getAttribute("cx"), y1: c.getAttribute("cy"), x2: to[0], y2: to[1] }));
        show(ev, `${o.range} ${o.country || ""} ${o.org || ""}\ncrawled by ${o.owner ? short(o.owner) : "nobody live"} (${o.owner_rtt_ms.toFixed(1)} ms, epoch ${o.epoch})`);
      });
      c.addEventListener("mouseleave", hide);
      dots.push(c);
    });
    gSubnets.replaceChildren(...dots);
    // crawlers
    crawlerXY = new Map();
    const marks = [];
    for (const p of crawlers) {
      if (!p.position) continue;
      const xy = proj([p.position.lon, p.position.lat]);
      if (!xy) continue;
      crawlerXY.set(p.peer_id, xy);
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
    $("#unplaced").textContent = [noPos ? `crawlers without a position: ${noPos}` : "", unplaced ? `subnets without a country position (not drawn): ${unplaced}` : ""].filter(Boolean).join("; ");

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
    rows($("#crawlers"), crawlers, (p) => [
      el("span", {}, el("span", { class: "swatch", style: `background:${colour(p.peer_id)}` }), el("code", { text: short(p.peer_id), title: p.peer_id })),
      p.state, subnets.get(p.peer_id) || 0, blocks.get(p.peer_id) || 0, p.load == null ? "" : p.load, p.capacity,
      p.position ? `${p.position.lat.toFixed(1)}, ${p.position.lon.toFixed(1)}` : "",
    ]);
    document.body.dataset.ready = "1";
  };
  live("network", 3000, render);
})().catch((e) => { document.getElementById("conn").textContent = "console error: " + e.message; throw e; });
