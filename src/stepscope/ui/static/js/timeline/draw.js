// Drawing the timeline canvas: the time ruler, slice and counter tracks, flows and selections.
// Pure functions of (context, layout, view, data): page.js owns the state and calls draw().

export const RULER_PX = 28;
export const LEVEL_PX = 16;
export const COUNTER_PX = 40;
export const MAX_LEVELS = 8;
export const FLOW_COLOR = "#00bcd4"; // cyan, as in the seed's timeline

const CATEGORY_HUES = {
  kernel: 225,
  gpu_memcpy: 140,
  gpu_memset: 95,
  cuda_runtime: 35,
  cuda_driver: 35,
  cpu_op: 265,
  user_annotation: 190,
  gpu_user_annotation: 190,
  python_function: 10,
};

function hash(text) {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return h >>> 0;
}

// A colour per name, in the hue family of its category, so related work looks related.
export function sliceColor(name, category) {
  const base = CATEGORY_HUES[category] ?? hash(category || "") % 360;
  const h = hash(name || "");
  const hue = (base + (h % 40) - 20 + 360) % 360;
  return `hsl(${hue}, ${55 + (h >> 8) % 20}%, ${58 + (h >> 16) % 14}%)`;
}

export function timeToX(t, view, width) {
  return ((t - view.start) / (view.end - view.start)) * width;
}

export function xToTime(x, view, width) {
  return view.start + (x / width) * (view.end - view.start);
}

// Ruler ticks: two to eight, at least this far apart where the width allows, so that their labels
// fit between them in a narrow window (eight ticks in 80 px wrote "0 s100200ms" over each other).
const TICK_MIN_PX = 90;

function niceStep(span, width) {
  const raw = span / Math.max(2, Math.min(8, Math.floor(width / TICK_MIN_PX)));
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * power >= raw) return m * power;
  return 10 * power;
}

// The unit is chosen by the value as rounded for display: 999.9996 µs reads "1.000 ms", not
// "1000.0 µs".
export function formatDuration(us) {
  const a = Math.abs(us);
  if (a === 0) return "0 s";
  const reaches = (scale) => a >= scale || Math.abs(Number((us / (scale / 1e3)).toFixed(1))) >= 1e3;
  if (reaches(1e6)) return `${(us / 1e6).toFixed(a >= 1e7 ? 1 : 3)} s`;
  if (reaches(1e3)) return `${(us / 1e3).toFixed(a >= 1e4 ? 1 : 3)} ms`;
  return `${us.toFixed(a >= 10 ? 1 : 3)} µs`;
}

// A time since the start in the unit of its size, with as many decimals as it takes to tell apart
// times `resolution` µs apart (ruler ticks 2 µs apart at 343 ms read 343.612 ms, 343.614 ms, ...).
export function formatOffset(us, resolution) {
  const a = Math.abs(us);
  if (a === 0) return "0 s";
  const [scale, unit] = a >= 1e6 ? [1e6, "s"] : a >= 1e3 ? [1e3, "ms"] : [1, "µs"];
  const decimals = Math.min(6, Math.max(0, Math.ceil(-Math.log10(resolution / scale) - 1e-9)));
  return `${(us / scale).toFixed(decimals)} ${unit}`;
}

// The ruler sits at `top`, the top of the scrolled track list, over the rows scrolled under it.
function drawRuler(ctx, view, width, origin, top) {
  ctx.save();
  ctx.translate(0, top);
  ctx.fillStyle = "#f6f7f9";
  ctx.fillRect(0, 0, width, RULER_PX);
  ctx.strokeStyle = "#d8dce3";
  ctx.beginPath();
  ctx.moveTo(0, RULER_PX - 0.5);
  ctx.lineTo(width, RULER_PX - 0.5);
  ctx.stroke();
  const step = niceStep(view.end - view.start, width);
  ctx.fillStyle = "#4a5160";
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  let free = 0; // where the last label drawn ends: a longer label than the ticks' gap skips the next
  for (let t = Math.ceil((view.start - origin) / step) * step; t + origin <= view.end; t += step) {
    const x = Math.round(timeToX(t + origin, view, width)) + 0.5;
    ctx.strokeStyle = "#c4c9d2";
    ctx.beginPath();
    ctx.moveTo(x, RULER_PX - 8);
    ctx.lineTo(x, RULER_PX);
    ctx.stroke();
    // a label that would run off the right edge is left out: cut, "14000 s" read "140"
    const label = formatOffset(t, step);
    const end = x + 3 + ctx.measureText(label).width;
    if (x + 3 >= free && end <= width) {
      ctx.fillText(label, x + 3, RULER_PX / 2);
      free = end + 6;
    }
  }
  ctx.restore();
}

function drawSlices(ctx, row, data, view, width, selected, hits) {
  const levels = row.levels;
  if (data.slices) {
    for (const [start, dur, depth, name, category] of data.slices) {
      if (depth >= levels) continue;
      const x0 = timeToX(start, view, width);
      const x1 = timeToX(start + dur, view, width);
      if (x1 < 0 || x0 > width) continue;
      const x = Math.max(x0, -1);
      const w = Math.max(Math.min(x1, width + 1) - x, 1);
      const y = row.y + 3 + depth * LEVEL_PX;
      ctx.fillStyle = sliceColor(name, category);
      ctx.fillRect(x, y, w, LEVEL_PX - 2);
      const isSelected = selected && selected.track === row.id && selected.start === start && selected.name === name;
      if (isSelected) {
        ctx.strokeStyle = "#111";
        ctx.lineWidth = 2;
        ctx.strokeRect(x + 1, y + 1, Math.max(w - 2, 1), LEVEL_PX - 4);
        ctx.lineWidth = 1;
      }
      if (w > 36) {
        ctx.save();
        ctx.beginPath();
        ctx.rect(x, y, w, LEVEL_PX - 2);
        ctx.clip();
        ctx.fillStyle = "#16181d";
        ctx.font = "11px system-ui, sans-serif";
        ctx.textBaseline = "middle";
        ctx.fillText(name, x + 3, y + (LEVEL_PX - 2) / 2);
        ctx.restore();
      }
      hits.push({ track: row.id, start, dur, name, category, x, y, w, h: LEVEL_PX - 2 });
    }
  } else if (data.bins) {
    const binUs = data.bin_us;
    for (const [start, count, busy, top] of data.bins) {
      const x = timeToX(start, view, width);
      const w = Math.max(timeToX(start + binUs, view, width) - x, 1);
      const fill = Math.min(1, busy / binUs);
      const h = Math.max(2, fill * (row.height - 6));
      ctx.fillStyle = sliceColor(top, "");
      ctx.globalAlpha = 0.85;
      ctx.fillRect(x, row.y + row.height - 3 - h, w, h);
      ctx.globalAlpha = 1;
      hits.push({ track: row.id, bin: true, start, dur: binUs, name: top, count, x, y: row.y, w, h: row.height });
    }
  }
}

// Samples this many times further apart than usual (a monitor that stopped, a job resumed
// later) leave a gap in a counter, as on the dashboard's charts, not a line drawn across it.
const GAP_FACTOR = 10;

// The points in runs without such a gap.
function runsOf(points) {
  const steps = points.slice(1).map((p, i) => p[0] - points[i][0]).sort((a, b) => a - b);
  const gap = steps.length < 2 ? Infinity : GAP_FACTOR * steps[Math.floor(steps.length / 2)];
  const runs = [[points[0]]];
  for (let i = 1; i < points.length; i++) {
    if (points[i][0] - points[i - 1][0] > gap) runs.push([]);
    runs[runs.length - 1].push(points[i]);
  }
  return runs;
}

function drawCounter(ctx, row, data, view, width, hits) {
  const points = data.points || [];
  if (!points.length) return;
  const max = Math.max(100, ...points.map((p) => p[1]));
  const y0 = row.y + row.height - 4;
  const scale = (row.height - 10) / max;
  for (const run of runsOf(points)) {
    const xs = run.map(([t]) => timeToX(t, view, width));
    const ys = run.map(([, v]) => y0 - v * scale);
    const pad = run.length === 1 ? 1.5 : 0; // a sample alone between gaps: a short dash
    const outline = () => {
      ctx.moveTo(xs[0] - pad, ys[0]);
      xs.forEach((x, i) => ctx.lineTo(x, ys[i]));
      ctx.lineTo(xs[xs.length - 1] + pad, ys[ys.length - 1]);
    };
    ctx.beginPath();
    outline();
    ctx.lineTo(xs[xs.length - 1] + pad, y0);
    ctx.lineTo(xs[0] - pad, y0);
    ctx.closePath();
    ctx.fillStyle = "rgba(66, 133, 244, 0.22)";
    ctx.fill();
    ctx.beginPath();
    outline();
    ctx.strokeStyle = "#3367d6";
    ctx.stroke();
    // each point answers a click from halfway to its neighbours in the run
    run.forEach(([t, v], i) => {
      const left = i === 0 ? xs[i] - 2 : (xs[i - 1] + xs[i]) / 2;
      const right = i === run.length - 1 ? xs[i] + 2 : (xs[i] + xs[i + 1]) / 2;
      hits.push({ track: row.id, counter: true, label: row.label, start: t, value: v, x: left, y: row.y, w: right - left, h: row.height });
    });
  }
}

function drawArrow(ctx, x0, y0, x1, y1) {
  ctx.beginPath();
  ctx.moveTo(x0, y0);
  const mid = (y0 + y1) / 2;
  ctx.bezierCurveTo(x0, mid, x1, mid, x1, y1);
  ctx.stroke();
  const angle = Math.atan2(y1 - mid, 0);
  ctx.beginPath();
  ctx.moveTo(x1, y1);
  ctx.lineTo(x1 - 5 * Math.cos(angle - 0.5), y1 - 5 * Math.sin(angle - 0.5));
  ctx.lineTo(x1 - 5 * Math.cos(angle + 0.5), y1 - 5 * Math.sin(angle + 0.5));
  ctx.closePath();
  ctx.fill();
}

const LAUNCH_CATEGORIES = new Set(["cuda_runtime", "cuda_driver"]);

// The level a flow's launch is drawn at on its track (several slices may start with it).
function launchDepth(row, trackData, startUs) {
  const launch = (trackData?.slices || []).find(([start, , , , category]) => start === startUs && LAUNCH_CATEGORIES.has(category));
  return launch ? Math.min(launch[2], row.levels - 1) : 0;
}

// Draws the tracks in sight: the canvas is `height` tall and shows the track list from `top`
// (rows, hit boxes and arrows keep the list's coordinates). Returns what was drawn (hit boxes
// for clicks, the flows drawn and their arrows as [x0, y0, x1, y1]).
export function draw(ctx, layout, view, data, { width, height, origin, selected, area, top = 0 }) {
  ctx.clearRect(0, 0, width, height);
  ctx.save();
  ctx.translate(0, -top);
  const hits = [];
  for (const row of layout.rows) {
    if (row.y > top + height || row.y + row.height < top + RULER_PX) continue;
    ctx.fillStyle = row.index % 2 ? "#ffffff" : "#fafbfc";
    ctx.fillRect(0, row.y, width, row.height);
    const trackData = data.tracks[row.id];
    if (!trackData) continue;
    if (row.kind === "counter") drawCounter(ctx, row, trackData, view, width, hits);
    else drawSlices(ctx, row, trackData, view, width, selected, hits);
  }
  const arrows = [];
  ctx.strokeStyle = FLOW_COLOR;
  ctx.fillStyle = FLOW_COLOR;
  ctx.lineWidth = 1.25;
  for (const flow of data.flows || []) {
    const from = layout.byId[flow.from[0]];
    const to = layout.byId[flow.to[0]];
    if (!from || !to) continue;
    const x0 = timeToX(flow.from[1], view, width);
    const x1 = timeToX(flow.to[1], view, width);
    if (Math.max(x0, x1) < 0 || Math.min(x0, x1) > width) continue;
    // from the bottom of the launch, at its own level, to the top of the GPU activity
    const y0 = from.y + 3 + launchDepth(from, data.tracks[flow.from[0]], flow.from[1]) * LEVEL_PX + LEVEL_PX - 2;
    drawArrow(ctx, x0, y0, x1, to.y + 3);
    arrows.push([x0, y0, x1, to.y + 3]);
  }
  ctx.lineWidth = 1;
  if (area) {
    const x0 = timeToX(area.start, view, width);
    const x1 = timeToX(area.end, view, width);
    ctx.fillStyle = "rgba(255, 193, 7, 0.18)";
    ctx.fillRect(x0, area.y0, x1 - x0, area.y1 - area.y0);
    ctx.strokeStyle = "#e0a800";
    ctx.strokeRect(x0 + 0.5, area.y0 + 0.5, x1 - x0, area.y1 - area.y0);
  }
  drawRuler(ctx, view, width, origin, top);
  ctx.restore();
  return { hits, flows: arrows.length, arrows };
}
