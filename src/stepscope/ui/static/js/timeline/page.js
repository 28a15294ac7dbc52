// The Timeline page: a collapsible track tree beside a canvas, fed by bounded window requests.
//
// Keys: w/s or ↑/↓ zoom in/out, a/d or ←/→ pan, f focuses the selected slice, 0 shows it all,
// ? lists the shortcuts (Escape closes the list); Enter in the find field selects the next slice of that name. Mouse: ctrl/⌘ + wheel zooms at the pointer, shift + wheel pans, a click
// selects a slice, a drag selects an area (its statistics appear in the bottom panel).

import { api, ApiError } from "../api.js";
import { clear, h } from "../dom.js";
import { failureNotice, showNotice } from "../notice.js";
import { loadedSelection, stillShown } from "../selection.js";
import { COUNTER_PX, LEVEL_PX, MAX_LEVELS, RULER_PX, draw, formatDuration, formatOffset, xToTime } from "./draw.js";

const ROW_MIN_PX = 22;
const FETCH_DELAY_MS = 60;
const LIVE_MS = 15000;
// The view goes into the URL once it rests this long (browsers refuse many URL changes a second).
const URL_DELAY_MS = 400;
// The server answers at most this many tracks per window request (MAX_TRACKS in routes/timeline.py).
const MAX_TRACKS = 400;
const SHORTCUTS = [
  ["w / ↑", "zoom in"],
  ["s / ↓", "zoom out"],
  ["a / ←", "move left"],
  ["d / →", "move right"],
  ["f", "zoom to the selected slice"],
  ["0", "show the whole job"],
  ["ctrl/⌘ + wheel", "zoom at the pointer"],
  ["shift + wheel", "move left or right"],
  ["click", "select a slice"],
  ["drag", "select an area and list what it covers"],
  ["Enter in Find", "select the next slice whose name holds the text"],
  ["?", "show or hide this list"],
  ["Escape", "hide this list"],
];

async function getJson(path, { poll = false } = {}) {
  const headers = { Accept: "application/json" };
  if (poll) headers["X-Stepscope-Poll"] = "1"; // a background refresh, not use (auto shutdown)
  const response = await fetch(path, { headers, credentials: "same-origin" });
  const payload = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, payload && payload.detail);
  return payload;
}

// What a focusable row needs to act as a button: a click, or Enter or Space once focused.
function pressable(action) {
  const onkeydown = (event) => {
    if (event.key !== "Enter" && event.key !== " ") return;
    event.preventDefault();
    action();
  };
  return { tabindex: "0", onclick: action, onkeydown };
}

function ensureStyles() {
  if (document.querySelector("link[data-timeline-css]")) return;
  document.head.append(h("link", { rel: "stylesheet", href: "/static/timeline.css", "data-timeline-css": "1" }));
}

// The tree: node → CPU / GPUs → GPU-i → tracks; groups collapse, and the layout follows.
function buildTree(tracks) {
  const root = { label: "", children: new Map(), tracks: [] };
  for (const track of tracks) {
    let node = root;
    for (const part of track.path.slice(0, -1)) {
      if (!node.children.has(part)) node.children.set(part, { label: part, children: new Map(), tracks: [], open: true });
      node = node.children.get(part);
    }
    node.tracks.push(track);
  }
  return root;
}

// The paths of the closed groups of a tree, and closing them again in a rebuilt tree.
function closedGroups(group, prefix = "", closed = new Set()) {
  for (const child of group.children.values()) {
    const path = `${prefix}/${child.label}`;
    if (!child.open) closed.add(path);
    closedGroups(child, path, closed);
  }
  return closed;
}

function closeGroups(group, closed, prefix = "") {
  for (const child of group.children.values()) {
    const path = `${prefix}/${child.label}`;
    child.open = !closed.has(path);
    closeGroups(child, closed, path);
  }
}

class TimelinePage {
  constructor(main, job, payload) {
    this.main = main;
    this.jobId = job.id;
    this.jobName = job.name;
    this.tracks = payload.tracks;
    this.bounds = payload.bounds;
    this.origin = payload.bounds[0];
    this.view = { start: payload.bounds[0], end: payload.bounds[1] };
    this.tree = buildTree(this.tracks);
    this.levels = {};
    this.data = { tracks: {}, flows: [] };
    this.selected = null;
    this.area = null;
    this.drawn = { hits: [], flows: 0, arrows: [] };
    this.requestId = 0;
    this.render();
    const linked = this.viewInUrl();
    if (linked) this.setView(...linked);
  }

  // -- the view in the URL ------------------------------------------------------------------
  // `from` and `to` (µs since the job's start) name the view, so a reload, back and forward, or
  // a link someone sent opens the same window.

  viewInUrl() {
    const params = new URLSearchParams(window.location.search);
    const [from, to] = [params.get("from"), params.get("to")].map((v) => (v === null || v === "" ? NaN : Number(v)));
    return Number.isFinite(from) && Number.isFinite(to) && to > from ? [this.origin + from, this.origin + to] : null;
  }

  rememberView() {
    clearTimeout(this.urlTimer);
    this.urlTimer = setTimeout(() => {
      const url = new URL(window.location.href);
      url.searchParams.set("from", (this.view.start - this.origin).toFixed(3));
      url.searchParams.set("to", (this.view.end - this.origin).toFixed(3));
      window.history.replaceState(window.history.state, "", url);
    }, URL_DELAY_MS);
  }

  // -- layout -----------------------------------------------------------------------------

  layout() {
    const rows = [];
    let y = RULER_PX;
    // a group's own tracks (e.g. the node's GPU utilization) come before its subgroups (GPU-i)
    const visit = (group, depth, prefix) => {
      for (const track of group.tracks) {
        const levels = Math.min(MAX_LEVELS, this.levels[track.id] || 1);
        const height = track.kind === "counter" ? COUNTER_PX : Math.max(ROW_MIN_PX, levels * LEVEL_PX + 6);
        rows.push({ id: track.id, track, label: track.path[track.path.length - 1], depth, y, height, kind: track.kind, levels });
        y += height;
      }
      for (const child of group.children.values()) {
        const path = `${prefix}/${child.label}`;
        rows.push({ group: child, label: child.label, path, depth, y, height: ROW_MIN_PX, kind: "group" });
        y += ROW_MIN_PX;
        if (child.open) visit(child, depth + 1, path);
      }
    };
    visit(this.tree, 0, "");
    rows.forEach((row, index) => (row.index = index));
    const byId = {};
    for (const row of rows) if (row.id) byId[row.id] = row;
    return { rows, byId, height: y };
  }

  // The tracks in sight in the scrolled track list, and a screenful above and below: a job of
  // many nodes has more tracks than one request may name, and only these are drawn anyway.
  visibleTrackIds() {
    const screen = this.body.clientHeight;
    const top = this.body.scrollTop - screen;
    const bottom = this.body.scrollTop + 2 * screen;
    return this.currentLayout.rows
      .filter((r) => r.id && r.y + r.height > top && r.y < bottom)
      .map((r) => r.id)
      .slice(0, MAX_TRACKS);
  }

  // -- DOM --------------------------------------------------------------------------------

  render() {
    ensureStyles();
    this.rangeLabel = h("span", { class: "tl-range", id: "tl-range" });
    this.findField = h("input", {
      type: "search", id: "tl-find", class: "tl-find", placeholder: "Find a slice by name", "aria-label": "Find a slice by name",
      onkeydown: (event) => { if (event.key === "Enter") this.findNext().catch(showError); },
    });
    this.findStatus = h("span", { class: "tl-find-status muted small", id: "tl-find-status", role: "status" });
    this.shortcuts = h("div", { class: "tl-shortcuts", id: "tl-shortcuts", hidden: true },
      h("h3", {}, "Keyboard and mouse"),
      h("table", {}, SHORTCUTS.map(([k, v]) => h("tr", {}, h("td", {}, h("kbd", {}, k)), h("td", {}, v)))));
    this.shortcutsButton = h("button", {
      class: "button", id: "tl-shortcuts-button", "aria-controls": "tl-shortcuts", "aria-expanded": "false",
      onclick: () => this.toggleShortcuts(),
    }, "Keyboard shortcuts");
    this.labels = h("div", { class: "tl-labels", id: "tl-tree" });
    this.canvas = h("canvas", { class: "tl-canvas", id: "tl-canvas", tabindex: "0" });
    this.canvasWrap = h("div", { class: "tl-canvas-wrap" }, this.canvas);
    this.body = h("div", { class: "tl-body" }, this.labels, this.canvasWrap);
    this.tabs = {
      selection: h("button", { class: "tl-tab active", "data-tab": "selection", onclick: () => this.showTab("selection") }, "Current Selection"),
      connections: h("button", { class: "tl-tab", "data-tab": "connections", onclick: () => this.showTab("connections") }, "Connections"),
    };
    this.panels = {
      selection: h("div", { class: "tl-panel", id: "tl-selection" }, h("p", { class: "muted" }, "Click a slice to see its details, or drag to select an area.")),
      connections: h("div", { class: "tl-panel", id: "tl-connections", hidden: true }, h("p", { class: "muted" }, "Select a kernel or a launch to see its connection.")),
    };
    clear(this.main).append(
      h("header", { class: "page-head tl-head" },
        h("h1", {}, `Timeline · ${this.jobName}`),
        h("div", { class: "tl-find-box" }, this.findField, this.findStatus),
        this.rangeLabel,
        this.shortcutsButton),
      this.shortcuts,
      this.body,
      h("section", { class: "tl-bottom" }, h("div", { class: "tl-tabs" }, this.tabs.selection, this.tabs.connections), this.panels.selection, this.panels.connections),
    );
    this.bindEvents();
    this.relayout();
    window.stepscopeTimeline = {
      state: () => ({ view: { ...this.view }, selected: this.selected, drawnFlows: this.drawn.flows, arrows: this.drawn.arrows, tracks: this.tracks.length }),
      locate: (trackId, startUs) => this.locate(trackId, startUs),
      show: (startUs, endUs) => this.setView(startUs, endUs),
    };
  }

  relayout() {
    // a group row toggled from the keyboard is drawn anew: the focus goes to its new row
    const focused = document.activeElement?.dataset?.group;
    this.currentLayout = this.layout();
    clear(this.labels).append(h("div", { class: "tl-ruler-gap", style: `height:${RULER_PX}px` }));
    for (const row of this.currentLayout.rows) {
      const style = `height:${row.height}px;padding-left:${8 + row.depth * 14}px`;
      if (row.kind === "group") {
        this.labels.append(h("div", {
          class: "tl-row tl-group", style, role: "button", "aria-expanded": String(row.group.open), "data-label": row.label, "data-group": row.path, title: row.label,
          ...pressable(() => { row.group.open = !row.group.open; this.relayout(); this.scheduleFetch(); }),
        }, h("span", { class: "tl-caret" }, row.group.open ? "▾" : "▸"), h("span", { class: "tl-name" }, row.label)));
      } else {
        this.labels.append(h("div", { class: `tl-row tl-track tl-${row.kind}`, style, "data-track": row.id, "data-label": row.label, title: row.track.path.join(" / ") },
          h("span", { class: "tl-name" }, row.label)));
      }
    }
    if (focused) this.labels.querySelector(`[data-group="${CSS.escape(focused)}"]`)?.focus();
    this.resize();
  }

  // The canvas covers only the part of the tracks in sight (it sticks to the top of the scrolled
  // list, whose wrapper is as tall as all tracks): a canvas as tall as all open tracks went past
  // the largest canvas Chromium draws (65,535 px), and stayed blank, from about 60 nodes on a
  // HiDPI screen.
  resize() {
    const ratio = window.devicePixelRatio || 1;
    const width = this.canvasWrap.clientWidth || 800;
    // never taller than the window, even before the page's styles bound the list (a canvas too
    // large to allocate once stays unusable)
    const height = Math.max(1, Math.min(this.currentLayout.height, this.body.clientHeight || window.innerHeight, window.innerHeight));
    this.canvasWrap.style.height = `${this.currentLayout.height}px`;
    this.width = width;
    this.height = height;
    this.canvas.width = Math.round(width * ratio);
    this.canvas.height = Math.round(height * ratio);
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    this.ctx = this.canvas.getContext("2d");
    this.ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    this.redraw();
  }

  redraw() {
    const started = performance.now();
    this.drawn = draw(this.ctx, this.currentLayout, this.view, this.data, {
      width: this.width, height: this.height, origin: this.origin, selected: this.selected, area: this.area,
      top: this.body.scrollTop,
    });
    this.lastFrameMs = performance.now() - started;
    const span = this.view.end - this.view.start;
    const resolution = Math.max(span / 1000, 1);
    this.rangeLabel.textContent = `${formatOffset(this.view.start - this.origin, resolution)} – ${formatOffset(this.view.end - this.origin, resolution)} (${formatDuration(span)} shown)`;
    this.rangeLabel.dataset.startUs = String(this.view.start);
    this.rangeLabel.dataset.endUs = String(this.view.end);
    this.canvas.dataset.flows = String(this.drawn.flows);
    this.canvas.dataset.frameMs = this.lastFrameMs.toFixed(2);
  }

  // -- data -------------------------------------------------------------------------------

  // A running job's timeline follows its data, as its dashboard does: every LIVE_MS the job's
  // tracks and time range are read again, until the job list says the job has ended. A read the
  // server fails leaves the page as it is, says so above the tracks and is made again at the
  // next one (or at Retry). A job removed since (or unloaded in another tab) ends it: the page
  // then says why it cannot show the job, as it does on opening.
  async followLive() {
    for (let first = true; ; first = false) {
      try {
        const now = (await api.jobs({ poll: !first })).jobs.find((j) => j.id === this.jobId);
        // a job no longer listed may have been removed as the page opened, before its first
        // refresh: then too the page says so
        if ((!first || !now) && !(await stillShown(this.jobId))) {
          this.close();
          await renderTimeline(this.main);
          return;
        }
        if (!first) {
          const payload = await getJson(`/api/jobs/${encodeURIComponent(this.jobId)}/timeline/tracks`, { poll: true });
          if (payload.bounds) this.takeTracks(payload);
        }
        this.clearFailure("live");
        if (!now || now.status !== "running") return;
      } catch (error) {
        this.showFailure("live", "The job's latest data", error, () => this.wakeLive());
      }
      await new Promise((resolve) => {
        this.wakeLive = resolve;
        window.setTimeout(resolve, LIVE_MS);
      });
    }
  }

  // The tracks of a live reread: the slices then asked for are a background poll too, which a
  // tab left open does not keep the server from its auto shutdown with.
  takeTracks(payload) {
    const closed = closedGroups(this.tree);
    this.tracks = payload.tracks;
    this.bounds = payload.bounds;
    this.tree = buildTree(this.tracks);
    closeGroups(this.tree, closed);
    this.relayout();
    this.scheduleFetch({ poll: true });
  }

  scheduleFetch({ poll = false } = {}) {
    clearTimeout(this.fetchTimer);
    this.fetchTimer = setTimeout(() => this.fetchWindow({ poll }), FETCH_DELAY_MS);
  }

  // Draws the view's slices; when the server fails to give them, says so above the tracks, which
  // stay usable (a move asks again, and so does Retry).
  async fetchWindow({ poll = false } = {}) {
    const id = ++this.requestId;
    const ids = this.visibleTrackIds();
    const bins = Math.max(50, Math.min(2000, Math.round(this.width / 2)));
    const span = this.view.end - this.view.start;
    const params = new URLSearchParams({
      start_us: String(this.view.start - span * 0.1),
      end_us: String(this.view.end + span * 0.1),
      tracks: ids.join(","),
      bins: String(bins),
    });
    let answer;
    try {
      answer = await getJson(`/api/jobs/${encodeURIComponent(this.jobId)}/timeline/window?${params}`, { poll });
    } catch (error) {
      if (id === this.requestId) this.showFailure("window", "The slices of this view", error, () => this.fetchWindow());
      return;
    }
    if (id !== this.requestId) return; // a newer view is on its way
    this.clearFailure("window");
    let grew = false;
    for (const [trackId, trackData] of Object.entries(answer.tracks)) {
      if (!trackData.slices) continue;
      const deepest = trackData.slices.reduce((m, s) => Math.max(m, s[2] + 1), 1);
      if (deepest > (this.levels[trackId] || 1) && (this.levels[trackId] || 1) < MAX_LEVELS) {
        this.levels[trackId] = Math.min(MAX_LEVELS, deepest);
        grew = true;
      }
    }
    this.data = answer;
    this.canvas.dataset.loaded = "1";
    if (grew) this.relayout();
    else this.redraw();
  }

  // Says above the tracks, which stay usable, that `what` could not be read, with Retry; one
  // notice per `kind` of read, replaced by its next failure and removed by its next success.
  showFailure(kind, what, error, retry) {
    showNotice(failureNotice(what, error, retry, { id: `tl-${kind}-error` }), this.body);
  }

  clearFailure(kind) {
    document.getElementById(`tl-${kind}-error`)?.remove();
  }

  // -- view changes -----------------------------------------------------------------------

  setView(start, end) {
    const [lo, hi] = this.bounds;
    const span = Math.min(Math.max(end - start, 1), (hi - lo) * 1.5 || 1);
    let s = Math.max(start, lo - span * 0.25);
    s = Math.min(s, hi + span * 0.25 - span);
    this.view = { start: s, end: s + span };
    this.redraw();
    this.scheduleFetch();
    this.rememberView();
  }

  zoom(factor, anchorX = this.width / 2) {
    const t = xToTime(anchorX, this.view, this.width);
    this.setView(t - (t - this.view.start) * factor, t + (this.view.end - t) * factor);
  }

  pan(fraction) {
    const shift = (this.view.end - this.view.start) * fraction;
    this.setView(this.view.start + shift, this.view.end + shift);
  }

  focusSelected() {
    if (!this.selected) return;
    const pad = Math.max(this.selected.dur * 0.25, 1);
    this.setView(this.selected.start - pad, this.selected.start + this.selected.dur + pad);
  }

  locate(trackId, startUs) {
    const hit = this.drawn.hits.find((box) => box.track === trackId && Math.abs(box.start - startUs) < 0.01);
    if (!hit) return null;
    const rect = this.canvas.getBoundingClientRect();
    return { x: rect.left + hit.x + Math.min(hit.w / 2, 4), y: rect.top + hit.y - this.body.scrollTop + hit.h / 2 };
  }

  // -- selection --------------------------------------------------------------------------

  showTab(name) {
    for (const [key, tab] of Object.entries(this.tabs)) tab.classList.toggle("active", key === name);
    for (const [key, panel] of Object.entries(this.panels)) panel.hidden = key !== name;
  }

  async select(hit) {
    this.area = null;
    if (hit.counter) {
      // counters are percentages (utilization, memory used), averaged over the zoom's bins
      this.selected = null;
      this.redraw();
      clear(this.panels.selection).append(h("dl", { class: "facts tl-facts" },
        [["Counter", hit.label], ["Time", formatOffset(hit.start - this.origin, (this.view.end - this.view.start) / this.width)], ["Value", `${hit.value.toFixed(1)} %`]]
          .map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])));
      this.showTab("selection");
      return;
    }
    if (hit.bin) {
      this.selected = null;
      this.redraw();
      clear(this.panels.selection).append(h("p", {}, `${hit.count.toLocaleString()} ${hit.count === 1 ? "slice" : "slices"} here, mostly “${hit.name}”. Zoom in (w) to see them one by one.`));
      return;
    }
    this.selected = { track: hit.track, start: hit.start, dur: hit.dur, name: hit.name };
    this.redraw();
    const params = new URLSearchParams({ track: hit.track, start_us: String(hit.start), name: hit.name });
    const found = await getJson(`/api/jobs/${encodeURIComponent(this.jobId)}/timeline/slice?${params}`);
    this.showDetails(found.details);
    this.showConnections(found.connections);
    this.showTab("selection");
  }

  showDetails(d) {
    const rows = [
      ["Name", d.name], ["Category", d.category], ["Source", d.source],
      ["Start", formatOffset(d.start_us - this.origin, 1)], ["Duration", formatDuration(d.dur_us)],
    ];
    if (d.rank >= 0) rows.push(["Rank", d.rank]);
    if (d.step >= 0) rows.push(["Step", d.step]);
    if (d.device >= 0) rows.push(["Device", d.device]);
    if (d.stream >= 0) rows.push(["Stream", d.stream]);
    if (d.correlation >= 0) rows.push(["Correlation", d.correlation]);
    if (d.external_id >= 0) rows.push(["External id", d.external_id]);
    if (d.bytes >= 0) rows.push(["Bytes", d.bytes.toLocaleString()]);
    if (d.pid >= 0) rows.push(["Process", d.pid]);
    if (d.tid >= 0) rows.push(["Thread", d.tid]);
    for (const [k, v] of Object.entries(d.args || {})) rows.push([k, typeof v === "object" ? JSON.stringify(v) : v]);
    clear(this.panels.selection).append(h("dl", { class: "facts tl-facts" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))])));
  }

  showConnections(connections) {
    const panel = clear(this.panels.connections);
    if (!connections.length) {
      panel.append(h("p", { class: "muted" }, "This slice has no launch ↔ GPU activity connection."));
      return;
    }
    panel.append(h("table", { class: "table tl-connections" },
      h("thead", {}, h("tr", {}, ["Relation", "Name", "Category", "Start", "Duration"].map((c) => h("th", {}, c)))),
      h("tbody", {}, connections.map((c) => h("tr", {
        class: "tl-link", role: "button", "data-track": c.track || "",
        ...pressable(() => this.jumpTo(c)),
      }, h("td", {}, c.relation), h("td", {}, c.name), h("td", {}, c.category),
      h("td", {}, formatOffset(c.start_us - this.origin, 1)), h("td", {}, formatDuration(c.dur_us)))))));
  }

  // Centres the slice in the view and scrolls to its track, opening the groups it sits in.
  async jumpTo(connection) {
    const pad = Math.max(connection.dur_us * 4, 20);
    this.selected = { track: connection.track, start: connection.start_us, dur: connection.dur_us, name: connection.name };
    this.setView(connection.start_us - pad, connection.start_us + connection.dur_us + pad);
    if (connection.track) {
      this.revealTrack(connection.track);
      const row = this.currentLayout.byId[connection.track];
      if (row) this.body.scrollTop = Math.max(0, row.y - 80);
    }
  }

  async selectArea(x0, x1, y0, y1) {
    const start = xToTime(Math.min(x0, x1), this.view, this.width);
    const end = xToTime(Math.max(x0, x1), this.view, this.width);
    const top = Math.min(y0, y1);
    const bottom = Math.max(y0, y1);
    this.area = { start, end, y0: top, y1: bottom };
    this.selected = null;
    this.redraw();
    const ids = this.currentLayout.rows.filter((r) => r.id && r.kind === "slices" && r.y + r.height > top && r.y < bottom).map((r) => r.id);
    const panel = clear(this.panels.selection);
    this.showTab("selection");
    if (!ids.length) {
      panel.append(h("p", { class: "muted" }, "The area covers no slice track."));
      return;
    }
    const params = new URLSearchParams({ start_us: String(start), end_us: String(end), tracks: ids.join(",") });
    const { rows } = await getJson(`/api/jobs/${encodeURIComponent(this.jobId)}/timeline/stats?${params}`);
    panel.append(
      h("p", { class: "tl-area-head" }, `Area: ${formatDuration(end - start)} on ${ids.length} track${ids.length === 1 ? "" : "s"}`),
      h("table", { class: "table tl-stats", id: "tl-area-stats" },
        h("thead", {}, h("tr", {}, ["Name", "Category", "Count", "Total time"].map((c) => h("th", {}, c)))),
        h("tbody", {}, rows.map((r) => h("tr", {}, h("td", {}, r.name), h("td", {}, r.category), h("td", { class: "num" }, r.count.toLocaleString()), h("td", { class: "num" }, formatDuration(r.total_us)))))));
  }

  // -- find -------------------------------------------------------------------------------------

  // Selects and shows the next slice whose name holds the text in the find field: the first
  // after the selected one, or after the start of the view for a new text; after the last,
  // the first again.
  async findNext() {
    const text = this.findField.value.trim();
    if (!text) return;
    const after = this.selected && text === this.lastFind ? this.selected.start : this.view.start - 1e-3;
    this.lastFind = text;
    const params = new URLSearchParams({ text, after_us: String(after) });
    const { count, match } = await getJson(`/api/jobs/${encodeURIComponent(this.jobId)}/timeline/find?${params}`);
    if (!match) {
      this.findStatus.textContent = `No slice's name holds “${text}”.`;
      return;
    }
    this.findStatus.textContent = `${count.toLocaleString()} ${count === 1 ? "match" : "matches"}`;
    this.jumpTo(match);
    await this.select({ track: match.track, start: match.start_us, dur: match.dur_us, name: match.name });
  }

  // Opens the groups a track sits in, so it can be scrolled to.
  revealTrack(trackId) {
    const track = this.tracks.find((t) => t.id === trackId);
    if (!track) return;
    let group = this.tree;
    let opened = false;
    for (const part of track.path.slice(0, -1)) {
      group = group.children.get(part);
      if (!group) return;
      opened = opened || !group.open;
      group.open = true;
    }
    if (opened) this.relayout();
  }

  toggleShortcuts(show = this.shortcuts.hidden) {
    this.shortcuts.hidden = !show;
    this.shortcutsButton.setAttribute("aria-expanded", String(show));
  }

  // -- events -----------------------------------------------------------------------------

  // Stops what the page does outside its own nodes, before another page is drawn in its place.
  close() {
    document.removeEventListener("keydown", this.onKey);
    this.resizeObserver.disconnect();
    clearTimeout(this.fetchTimer);
    clearTimeout(this.urlTimer);
  }

  bindEvents() {
    const keys = {
      w: () => this.zoom(0.7), ArrowUp: () => this.zoom(0.7),
      s: () => this.zoom(1 / 0.7), ArrowDown: () => this.zoom(1 / 0.7),
      a: () => this.pan(-0.2), ArrowLeft: () => this.pan(-0.2),
      d: () => this.pan(0.2), ArrowRight: () => this.pan(0.2),
      f: () => this.focusSelected(),
      0: () => this.setView(this.bounds[0], this.bounds[1]),
      "?": () => this.toggleShortcuts(),
      Escape: () => this.toggleShortcuts(false),
    };
    this.onKey = (event) => {
      if (event.target instanceof HTMLInputElement || event.ctrlKey || event.metaKey || event.altKey) return;
      const action = keys[event.key];
      if (!action) return;
      event.preventDefault();
      action();
    };
    document.addEventListener("keydown", this.onKey);
    this.body.addEventListener("scroll", () => {
      this.redraw();
      this.scheduleFetch();
    });
    this.canvas.addEventListener("wheel", (event) => {
      if (event.ctrlKey || event.metaKey) {
        event.preventDefault();
        this.zoom(event.deltaY > 0 ? 1.25 : 0.8, event.offsetX);
      } else if (event.shiftKey) {
        event.preventDefault();
        this.pan((event.deltaY || event.deltaX) > 0 ? 0.1 : -0.1);
      }
    }, { passive: false });
    let drag = null;
    // the y of a pointer in the track list (where rows and hit boxes are), not on the canvas
    const trackY = (event) => event.offsetY + this.body.scrollTop;
    this.canvas.addEventListener("mousedown", (event) => {
      drag = { x: event.offsetX, y: trackY(event) };
      this.canvas.focus();
    });
    this.canvas.addEventListener("mousemove", (event) => {
      if (!drag || Math.abs(event.offsetX - drag.x) < 4) return;
      this.area = {
        start: xToTime(Math.min(drag.x, event.offsetX), this.view, this.width),
        end: xToTime(Math.max(drag.x, event.offsetX), this.view, this.width),
        y0: Math.min(drag.y, trackY(event)), y1: Math.max(drag.y, trackY(event)),
      };
      this.redraw();
    });
    this.canvas.addEventListener("mouseup", (event) => {
      const start = drag;
      drag = null;
      if (!start) return;
      if (Math.abs(event.offsetX - start.x) >= 4) {
        this.selectArea(start.x, event.offsetX, start.y, trackY(event)).catch(showError);
        return;
      }
      const y = trackY(event);
      if (y < this.body.scrollTop + RULER_PX) return; // the ruler covers the rows there
      const hit = [...this.drawn.hits].reverse().find((b) => event.offsetX >= b.x - 1 && event.offsetX <= b.x + b.w + 1 && y >= b.y && y <= b.y + b.h);
      if (hit) this.select(hit).catch(showError);
    });
    this.resizeObserver = new ResizeObserver(() => this.resize());
    this.resizeObserver.observe(this.canvasWrap);
    this.resizeObserver.observe(this.body);
  }
}

function showError(error) {
  const panel = document.getElementById("tl-selection");
  if (panel) clear(panel).append(h("div", { class: "notice error" }, error.message));
}

export async function renderTimeline(main) {
  clear(main).append(h("header", { class: "page-head" }, h("h1", {}, "Timeline")));
  const loaded = await loadedSelection(main, "its timeline");
  if (!loaded) return;
  main.querySelector("h1").textContent = `Timeline · ${loaded.name}`;
  const id = loaded.id;
  const tracks = `/api/jobs/${encodeURIComponent(id)}/timeline/tracks`;
  const running = async () => (await api.jobs({ poll: true })).jobs.find((j) => j.id === id)?.status === "running";
  let payload;
  try {
    payload = await getJson(tracks);
  } catch (error) {
    if (error instanceof ApiError && (error.status === 404 || error.status === 409)) {
      main.append(h("div", { class: "notice" }, `${error.message} `, h("a", { href: "/" }, "Go to Load profile.")));
    } else {
      main.append(failureNotice("The timeline's tracks", error, () => renderTimeline(main)));
    }
    return;
  }
  if (!payload.bounds) {
    // a running job that has written nothing yet: its tracks are asked for every LIVE_MS, and
    // its timeline drawn once its first data arrived (a failed reading asks again later); a
    // recording that has ended holds none, not "yet"
    let live = await running().catch(() => true);
    main.append(h("div", { class: "notice" }, `This profile holds no events or metrics${live ? " yet" : ""}.`));
    while (!payload.bounds) {
      if (!live) return;
      await new Promise((resolve) => window.setTimeout(resolve, LIVE_MS));
      payload = await getJson(tracks, { poll: true }).catch(() => payload);
      live = await running().catch(() => true);
    }
  }
  const page = new TimelinePage(main, loaded, payload);
  await page.fetchWindow();
  page.followLive();
}
