// Draws the server's panel payloads with plotly (see stepscope/ui/panels.py for their shapes).

const COLORS = [
  "#3b6ea5", "#e08a3c", "#5a9e6f", "#c8553d", "#8c6bb1", "#4aa3a8", "#d4b44a", "#b5658f",
  "#6c8ebf", "#9c7c54", "#77a34a", "#d07a6a", "#5d6d9e", "#a3a84a", "#4f8a8b", "#c79a5b",
];
const OTHERS = "#b8bec6";

// The colour of slice `j` of a pie: the palette's, then hues a golden angle apart in six
// saturation and lightness pairs, so no two of the up to 100 kernels a pie shows share one (the
// palette repeated from the 17th, and two kernels looked the same). Hues close to each other
// come far apart in the sequence, where their pairs differ.
function sliceColor(j) {
  if (j < COLORS.length) return COLORS[j];
  const n = j - COLORS.length;
  return `hsl(${((n * 137.508) % 360).toFixed(1)}, ${n % 2 ? 70 : 50}%, ${[42, 58, 72][n % 3]}%)`;
}
const ACTIVE_IDLE = { Active: "#3b6ea5", Idle: "#d5dae0" };

const CONFIG = { displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d", "toImage"] };

function baseLayout(extra = {}) {
  return {
    font: { family: "Inter, system-ui, -apple-system, 'Segoe UI', sans-serif", size: 12, color: "#2b3440" },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    margin: { l: 56, r: 16, t: 12, b: 44 },
    colorway: COLORS,
    hoverlabel: { bgcolor: "#ffffff", bordercolor: "#c9d0d8", font: { size: 12, color: "#1f2933" }, align: "left" },
    ...extra,
  };
}

const axis = (title, extra = {}) => ({
  title: { text: title, font: { size: 12, color: "#5b6672" } },
  gridcolor: "#e6e9ed",
  zerolinecolor: "#c9d0d8",
  linecolor: "#c9d0d8",
  ...extra,
});

// Pies of several nodes or ranks sit side by side, at most this many to a row, so each stays
// readable however many nodes the job has.
const PIES_PER_ROW = 4;
const PIE_ROW_PX = 200;
const PIE_TITLE_PX = 24;

// The legend of one pie of many slices sits beside it where its names fit, else under it, so
// the pie keeps its size (beside a legend of kernel names wider than the room left, it shrank
// to a dot in a window of half a screen). A name takes about this many px a character, after
// its swatch; under the pie, the legend shows this many entries and scrolls for the others.
const LEGEND_CHAR_PX = 6.6;
const LEGEND_SWATCH_PX = 44;
const PIE_PX = 260;
const LEGEND_ENTRY_PX = 19;
const LEGEND_ENTRIES_SHOWN = 16;

// A name as the lines of at most `perLine` characters it takes under the pie, broken after the
// last space or punctuation of a line where one falls in its second half: cut off at the edge,
// a long kernel name could not be read (plotly gives a legend entry no tooltip).
function wrapName(name, perLine) {
  const lines = [];
  let rest = name;
  while (rest.length > perLine) {
    const at = rest.slice(0, perLine).search(/[\s,;(<:][^\s,;(<:]*$/);
    const cut = at >= perLine / 2 ? at + 1 : perLine;
    lines.push(rest.slice(0, cut));
    rest = rest.slice(cut);
  }
  return [...lines, rest];
}

function pies(payload, widthPx) {
  const n = payload.pies.length;
  const columns = Math.min(n, PIES_PER_ROW);
  const rows = Math.ceil(n / columns);
  const gap = 0.04;
  const width = (1 - gap * (columns - 1)) / columns;
  const height = 1 / rows;
  const title = n > 1 ? PIE_TITLE_PX / (rows * PIE_ROW_PX) : 0;
  const cell = (i) => {
    const x = (i % columns) * (width + gap);
    const top = 1 - Math.floor(i / columns) * height;
    return { x: [x, x + width], y: [top - height + gap / rows, top - title] };
  };
  const labels = payload.pies[0].labels;
  const many = labels.length > 2;
  const long = labels.length > 6;
  const legendX = long ? 0.42 : 0.66;
  const namePx = LEGEND_SWATCH_PX + LEGEND_CHAR_PX * Math.max(...labels.map((l) => String(l).length));
  const under = many && n === 1 && widthPx * (1 - legendX) < namePx;
  // under the pie: each name on the lines it takes at this width, the height of the legend's
  // entries, and the share of the plot the pie takes
  const perLine = Math.max(1, Math.floor((widthPx - LEGEND_SWATCH_PX - 16) / LEGEND_CHAR_PX));
  const legendLabel = (label) => (under ? wrapName(String(label), perLine) : [String(label)]);
  const lineCount = labels.reduce((sum, label) => sum + legendLabel(label).length, 0);
  const legendPx = LEGEND_ENTRY_PX * Math.min(lineCount, LEGEND_ENTRIES_SHOWN);
  const pieShare = PIE_PX / (PIE_PX + legendPx);
  const traces = payload.pies.map((pie, i) => ({
    type: "pie",
    name: pie.title,
    labels: pie.labels.map((label) => legendLabel(label).map(escapeText).join("<br>")),
    values: pie.values,
    hovertext: pie.hover.map(richText),
    hovertemplate: "%{hovertext}<extra></extra>",
    // the server's shares (of all kernels, even on a top-15 pie); none on slivers, unreadable there
    text: pie.pct.map((p) => (p >= 2 ? `${p.toFixed(1)}%` : "")),
    textinfo: "text",
    textposition: "inside",
    insidetextorientation: "horizontal",
    sort: false,
    direction: "clockwise",
    hole: 0.35,
    marker: {
      colors: pie.labels.map((label, j) => ACTIVE_IDLE[label] || (label === "others" ? OTHERS : sliceColor(j))),
      line: { color: "#ffffff", width: 1 },
    },
    domain: under ? { x: [0, 1], y: [1 - pieShare, 1] }
      : many && n === 1 ? { x: long ? [0, 0.36] : [0.04, 0.6], y: [0, 1] } : cell(i),
  }));
  const annotations = n > 1
    ? payload.pies.map((pie, i) => {
        const { x, y } = cell(i);
        return {
          text: `<b>${escapeText(pie.title)}</b>`, showarrow: false, xref: "paper", yref: "paper",
          x: (x[0] + x[1]) / 2, y: y[1], xanchor: "center", yanchor: "bottom",
        };
      })
    : [];
  const layout = baseLayout({
    height: under ? PIE_PX + legendPx + 24 : many ? 340 : n > 1 ? 80 + rows * PIE_ROW_PX : 280,
    showlegend: true,
    legend: under
      ? { orientation: "v", x: 0, xanchor: "left", y: 1 - pieShare - 0.01, yanchor: "top", maxheight: legendPx, font: { size: 11.5 } }
      : many
        ? { orientation: "v", x: legendX, xanchor: "left", y: 0.5, yanchor: "middle", font: { size: long ? 11.5 : 12.5 } }
        : { orientation: "h", x: 0.5, xanchor: "center", y: -0.05 / rows },
    margin: { l: 8, r: 8, t: 8, b: 8 },
    annotations,
  });
  return { traces, layout };
}

// A sample with a gap (a null) or an end on both sides has no line to be drawn on: a dot shows it.
const lone = (y, i) => y[i] !== null && (i === 0 || y[i - 1] === null) && (i === y.length - 1 || y[i + 1] === null);

// How many lines a horizontal legend of `names` takes in `widthPx`: an entry is its swatch and
// its name at 12 px, side by side until the width is used.
const LEGEND_LINE_PX = 20;
function legendLines(names, widthPx) {
  let count = 1;
  let used = 0;
  for (const name of names) {
    const entry = 46 + 7 * name.length;
    if (used > 0 && used + entry > widthPx) {
      count += 1;
      used = 0;
    }
    used += entry;
  }
  return count;
}

function lines(payload, widthPx) {
  const traces = payload.series.map((s) => ({
    type: "scatter", mode: "lines+markers", name: escapeText(s.name), x: s.x, y: s.y, line: { width: 1.6 },
    marker: { size: s.y.map((_, i) => (lone(s.y, i) ? 5 : 0)) },
    hovertemplate: `${escapeText(s.name)}: %{y:.1f} %<br>%{x:.1f} s since start<extra></extra>`,
  }));
  // The legend sits above the plot in a top margin made for as many lines as it takes at this
  // width: laid over the plot, the legend of many nodes hid their lines and the axis.
  const legend = payload.series.length > 1;
  const legendHeight = legend ? LEGEND_LINE_PX * legendLines(payload.series.map((s) => s.name), widthPx - 72) + 8 : 0;
  const layout = baseLayout({
    height: 280 + legendHeight,
    showlegend: legend,
    legend: { orientation: "h", x: 0, y: 1, yanchor: "bottom" },
    margin: { l: 56, r: 16, t: 12 + legendHeight, b: 44 },
    xaxis: axis(payload.x_title),
    yaxis: axis(payload.y_title, { range: [0, 105] }),
  });
  return { traces, layout };
}

function histogram(payload) {
  const edges = payload.edges;
  const centers = edges.slice(0, -1).map((e, i) => (e + edges[i + 1]) / 2);
  const width = edges[1] - edges[0];
  const unit = payload.unit;
  const traces = payload.series.map((s) => {
    const total = s.counts.reduce((a, b) => a + b, 0) || 1;
    const hover = s.counts.map((c, i) =>
      `${escapeText(s.name)}<br>${edges[i].toFixed(2)}–${edges[i + 1].toFixed(2)} ${unit}<br>${c} (${((100 * c) / total).toFixed(1)} %)`);
    return {
      type: "bar", name: `${escapeText(s.name)} (n=${s.stats.count}, median ${s.stats.median.toFixed(2)} ${unit})`,
      x: centers, y: s.counts, width, hovertext: hover, hovertemplate: "%{hovertext}<extra></extra>",
      opacity: payload.series.length > 1 ? 0.7 : 1, marker: { line: { color: "#ffffff", width: 0.5 } },
    };
  });
  // A few slow outliers beside hundreds of typical durations would be invisible bars on a linear
  // axis; a log axis keeps them in sight, which is what this chart is for.
  const counts = payload.series.flatMap((s) => s.counts).filter((c) => c > 0);
  const logScale = counts.length > 0 && Math.max(...counts) / Math.min(...counts) > 50;
  // The legend sits above the plot, one line per series (each names its count and median), in
  // a top margin made for it: laid over the plot, it hid the tallest bars.
  const legendHeight = 20 * payload.series.length;
  const layout = baseLayout({
    height: 260 + legendHeight,
    barmode: "overlay",
    showlegend: true,
    legend: { orientation: "v", x: 0, y: 1, yanchor: "bottom" },
    margin: { l: 56, r: 16, t: 12 + legendHeight, b: 44 },
    xaxis: axis(`duration (${unit})`),
    // counts are whole: a few steps per bin would otherwise get ticks at 0.2, 0.4, ...
    yaxis: logScale
      ? axis("count (log scale)", { type: "log", dtick: 1 })
      : axis("count", { rangemode: "tozero", ...(Math.max(0, ...counts) < 8 ? { dtick: 1 } : {}) }),
  });
  return { traces, layout };
}

function bars(payload) {
  const traces = payload.series.map((s) => ({
    type: "bar", orientation: "h", name: escapeText(s.name), y: payload.categories, x: s.values,
    hovertext: s.hover.map(richText), hovertemplate: "%{hovertext}<extra></extra>",
  }));
  const layout = baseLayout({
    height: Math.max(160, 90 + 34 * payload.categories.length),
    barmode: "stack",
    showlegend: true,
    legend: { orientation: "h", y: 1.18, x: 0, traceorder: "normal" },
    margin: { l: 70, r: 16, t: 12, b: 44 },
    xaxis: axis(payload.unit),
    yaxis: axis("", { autorange: "reversed", tickvals: payload.categories, ticktext: payload.categories.map(escapeText) }),
  });
  return { traces, layout };
}

const BUILDERS = { pies, lines, histogram, bars };

// A chart is laid out for the width of its box (where a legend goes, how many lines it takes),
// so it is drawn again whenever that width changes. Plotly's own resize kept the layout and
// took the height of the box, which has none of its own: the chart spilled over the cards below.
export function drawChart(node, payload) {
  node.chartPayload = payload;
  if (!node.chartObserver) {
    let width = node.clientWidth;
    node.chartObserver = new ResizeObserver(() => {
      if (node.clientWidth === width) return;
      width = node.clientWidth;
      if (node.chartPayload && width > 0) draw(node, node.chartPayload);
    });
    node.chartObserver.observe(node);
  }
  return draw(node, payload);
}

function draw(node, payload) {
  const width = node.clientWidth || window.innerWidth;
  const { traces, layout } = BUILDERS[payload.kind](payload, width);
  return window.Plotly.react(node, traces, { ...layout, width }, CONFIG);
}

export function purgeChart(node) {
  node.chartObserver?.disconnect();
  node.chartObserver = null;
  node.chartPayload = null;
  if (window.Plotly) window.Plotly.purge(node);
}

// Every text from a job (node, kernel and annotation names) goes through here on its way to
// plotly, which reads a small HTML subset in all its text and fills in "%{...}" in hover and text
// templates: "%" as an entity stops a name's "%{x}" from being filled in, wherever it lands.
function escapeText(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/%/g, "&#37;");
}

// Server hover text is plain text with newlines; plotly reads a small HTML subset.
function richText(text) {
  return escapeText(text).replace(/\n/g, "<br>");
}
