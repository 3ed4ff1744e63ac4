// Shared by the console's pages: live updates (events or polling), formatting, colours. No framework:
// the pages are plain DOM over the node's JSON (docs/console.md).
"use strict";
const micra = (() => {
  const $ = (sel) => document.querySelector(sel);
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k);
    return e;
  };
  const short = (id) => (id && id.length > 16 ? id.slice(0, 8) + "…" + id.slice(-6) : id || "");
  const num = (x) => (x == null ? "–" : Number(x).toLocaleString("en"));
  const ago = (t) => {
    if (!t) return "never";
    const s = (Date.now() - Date.parse(t)) / 1000;
    if (s < 60) return Math.max(0, Math.round(s)) + " s ago";
    if (s < 3600) return Math.round(s / 60) + " min ago";
    return Math.round(s / 3600) + " h ago";
  };
  // colours: the crawlers a page knows get a palette of distinct colours in
  // the order of their peer ids (assign), so every page of this node gives
  // a crawler the same colour; anyone else a hue hashed from its id
  const palette = ["#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7",
    "#9c755f", "#1f3b73", "#8cd17d", "#d37295", "#499894", "#b6992d", "#86bcb6", "#f1ce63"];
  const assigned = new Map();
  const assign = (ids) => {
    assigned.clear();
    [...ids].sort().forEach((id, i) => { if (i < palette.length) assigned.set(id, palette[i]); });
  };
  const colour = (id) => {
    if (!id) return "#9aa3ad";
    if (assigned.has(id)) return assigned.get(id);
    let h = 2166136261;
    for (let i = 0; i < id.length; i++) { h ^= id.charCodeAt(i); h = Math.imul(h, 16777619); }
    return `hsl(${(h >>> 0) % 360}, 65%, 45%)`;
  };
  // rows fills a <tbody> with one row per item, each a list of cells
  const rows = (tbody, items, cells) => {
    tbody.replaceChildren(...items.map((it) => {
      const tr = el("tr");
      for (const c of cells(it)) {
        const td = c instanceof Node ? el("td", {}, c) : el("td", { text: c == null ? "" : String(c) });
        if (typeof c === "number") td.className = "num";
        tr.append(td);
      }
      return tr;
    }));
  };
  const connOK = (how) => {
    $("#conn").textContent = `live (${how}) · ` + new Date().toLocaleTimeString();
    $("#conn").className = "right";
  };
  const connBad = (msg) => {
    $("#conn").textContent = msg;
    $("#conn").className = "right bad";
  };
  // show renders a view; a page that cannot render it says so (and the
  // browser's console, where the tests look)
  const show = (render, v) => {
    try {
      render(v);
      return true;
    } catch (e) {
      console.error("render:", e);
      connBad("cannot show the answer: " + e.message);
      return false;
    }
  };
  // poll calls fetch(url) every `every` ms while the page is visible, then
  // render(json); a hidden page asks nothing of the server.
  const poll = (url, every, render) => {
    let timer = null, busy = false;
    const tick = async () => {
      if (busy) return;
      busy = true;
      timer = null;
      let v = null;
      try {
        const r = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
        if (!r.ok) throw new Error(`${url}: ${r.status}`);
        v = await r.json();
      } catch (e) {
        connBad("not answering: " + e.message);
      }
      if (v && show(render, v)) connOK("polling");
      busy = false;
      if (!document.hidden) timer = setTimeout(tick, every);
    };
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && timer == null) tick();
    });
    tick();
  };
  // live follows a page's view by Server-Sent Events (/console/PAGE.events:
  // the server pushes it every `every` ms while the page is open), closed
  // while the page is hidden; it polls /console/PAGE.json instead when the
  // browser has no EventSource, when the stream cannot open (a proxy, the
  // server's bound on streams) or with ?poll in the page's address.
  // body[data-transport] says which.
  const live = (page, every, render) => {
    const json = `/console/${page}.json`;
    const fallBack = () => {
      document.body.dataset.transport = "poll";
      poll(json, every, render);
    };
    if (!window.EventSource || new URLSearchParams(location.search).has("poll")) return fallBack();
    document.body.dataset.transport = "sse";
    let es = null, got = false, fell = false;
    const open = () => {
      es = new EventSource(`/console/${page}.events`);
      es.addEventListener("view", (e) => {
        got = true;
        if (show(render, JSON.parse(e.data))) connOK("events");
      });
      es.onerror = () => {
        if (!got || es.readyState === EventSource.CLOSED) {
          // never opened, or refused on reconnecting: poll instead
          es.close();
          es = null;
          fell = true;
          fallBack();
          return;
        }
        connBad("not answering: reconnecting…"); // EventSource retries by itself
      };
    };
    document.addEventListener("visibilitychange", () => {
      if (fell) return;
      if (document.hidden && es) {
        es.close();
        es = null;
      } else if (!document.hidden && !es) {
        open();
      }
    });
    open();
  };
  return { $, el, short, num, ago, colour, assign, rows, poll, live };
})();
