// The Dashboard page: every panel of the selected loaded profile, computed by the server, plus
// rule verdicts and "Create a new histogram" of a custom annotation. A running job refreshes
// itself in the background.

import { api, ApiError } from "./api.js";
import { drawChart, purgeChart } from "./charts.js";
import { clear, h } from "./dom.js";
import { formatDuration, formatPlaces, formatTime, holdsNoRecords, NO_RECORDS, OWN_CLOCK, STATUS_LABEL } from "./format.js";
import { failureNotice } from "./notice.js";
import { loadedSelection, stillShown } from "./selection.js";

const REFRESH_MS = 15000;
const LIVE = "Live: refreshes every 15 s";

// Sections and their panels, in display order; "wide" panels span both columns.
const LAYOUT = [
  ["System utilization", [
    ["gpu_active_time"], ["cpu_active_time"], ["gpu_utilization", "wide"], ["cpu_utilization", "wide"]]],
  ["GPU kernels", [
    ["kernel_time_all", "wide"], ["kernel_time_top", "wide"], ["kernel_launches_all", "wide"], ["kernel_launches_top", "wide"]]],
  ["Steps and GPU activity", [
    ["step_time"], ["kernel_precision"], ["gpu_activity"], ["memory_operations"], ["step_breakdown", "wide"]]],
];

export async function renderDashboard(main) {
  clear(main).append(h("header", { class: "page-head" }, h("h1", {}, "Dashboard")));
  const loaded = await loadedSelection(main, "its dashboard");
  if (!loaded) return;
  const id = loaded.id;
  // the job's record (its status, nodes, ...) and the list of panels; without them, the page
  // says so under its title, with Retry
  let jobs, catalog;
  try {
    [{ jobs }, catalog] = await Promise.all([api.jobs(), api.panels()]);
  } catch (error) {
    main.querySelector("h1").textContent = `Dashboard · ${loaded.name}`;
    main.append(failureNotice("The dashboard", error, () => renderDashboard(main)));
    return;
  }
  const job = { ...jobs.find((j) => j.id === id), ...loaded };
  const { panels, default_k: defaultK, max_k: maxK } = catalog;
  const titles = Object.fromEntries(panels.map((p) => [p.name, p]));

  const cards = new Map();
  const sections = LAYOUT.map(([title, members]) => h("section", { class: "dash-section" },
    h("h2", { class: "section-title" }, title),
    h("div", { class: "grid" }, members.map(([name, wide]) => {
      const card = panelCard(id, titles[name], { wide: wide === "wide", defaultK, maxK });
      cards.set(name, card);
      return card.node;
    }))));

  const rules = h("section", { class: "card wide", id: "rules" });
  const custom = customHistograms(id);
  clear(main).append(
    h("header", { class: "page-head" },
      h("div", {}, h("h1", {}, job.name), lead(job)),
      job.status === "running" ? h("span", { class: "live" }, LIVE) : null),
    ...sections,
    h("section", { class: "dash-section" }, h("h2", { class: "section-title" }, "Custom annotations"), custom.node),
    h("section", { class: "dash-section" }, h("h2", { class: "section-title" }, "Rules"), rules),
  );
  const refreshAll = async (poll) => {
    await Promise.all([...cards.values()].map((c) => c.load(poll)));
    await renderRules(rules, id, poll);
  };
  // the annotation names come with the panels, not after them: until they do, nothing can be
  // picked, rather than every name typed being said not to be the job's
  await Promise.all([refreshAll(false), custom.init()]);
  if (job.status === "running") {
    const timer = window.setInterval(async () => {
      const live = main.querySelector(".live");
      try {
        if (!(await stillShown(id))) {
          window.clearInterval(timer);
          await renderDashboard(main);
          return;
        }
        // the job list rediscovers the job, so a job that ended stops the refreshes
        const now = (await api.jobs({ poll: true })).jobs.find((j) => j.id === id);
        await refreshAll(true).catch(() => {});
        await custom.reload(true);
        // the panels just read the new data, so the profile knows how long the job has run
        const profile = (await api.loaded({ poll: true })).loaded.find((p) => p.id === id);
        if (now && profile) main.querySelector(".page-head .lead")?.replaceWith(lead({ ...now, ...profile }));
        live.textContent = LIVE;
        if (!now || now.status !== "running") {
          window.clearInterval(timer);
          live.replaceWith(h("span", { class: "live" }, "The job has ended"));
        }
      } catch (error) {
        // the page keeps what it shows, and the next refresh asks again
        live.textContent = `${LIVE} (the last one failed: ${error.message})`;
      }
    }, REFRESH_MS);
  }
}

// The job's status, start (or why it has none), length so far and nodes (or ranks), under its name.
function lead(job) {
  const places = formatPlaces(job, { count: true });
  return h("p", { class: "lead" },
    h("span", { class: `badge status-${job.status}` }, STATUS_LABEL[job.status] || job.status),
    " ", job.own_clock ? h("span", { title: OWN_CLOCK }, "Start date unknown (the trace keeps its own clock)")
      : holdsNoRecords(job) ? NO_RECORDS : `Started ${formatTime(job.start_us)}`,
    job.duration_s !== null && job.duration_s !== undefined ? ` · ${formatDuration(job.duration_s)}` : "",
    places ? ` · ${places}` : "");
}

function panelCard(jobId, panel, { wide, defaultK, maxK, params = {}, title = null, onRemove = null }) {
  const chart = h("div", { class: "chart", "data-panel": panel.name });
  const message = h("p", { class: "empty", hidden: true });
  const note = h("p", { class: "note", hidden: true });
  const controls = [];
  let k = defaultK;
  let kLabel = null;
  if (panel.uses_k) {
    const input = h("input", {
      type: "number", min: 1, max: maxK, value: defaultK, class: "k-input", "aria-label": "k: kernels shown",
    });
    input.addEventListener("change", () => {
      const value = Number(input.value);
      // a whole number of kernels in range, else the field goes back to the k shown and says
      // what it takes (it went back without a word, and 150 looked ignored)
      if (Number.isInteger(value) && value >= 1 && value <= maxK) {
        k = value;
        load(false);
      } else {
        input.value = String(k);
        input.setCustomValidity(`k is a whole number of kernels from 1 to ${maxK}; the chart still shows ${k}.`);
        input.reportValidity();
      }
    });
    input.addEventListener("input", () => input.setCustomValidity(""));
    kLabel = h("label", { class: "k-label" }, "k", input);
    controls.push(kLabel);
  }
  if (onRemove) {
    controls.push(h("button", { class: "icon-button", type: "button", title: "Remove this histogram",
      "aria-label": "Remove this histogram", onclick: () => { purgeChart(chart); node.remove(); onRemove(); } }, "✕"));
  }
  const node = h("article", { class: `card panel${wide ? " wide" : ""}`, "data-panel": panel.name },
    h("div", { class: "card-head" }, h("h3", {}, title || panel.title), h("div", { class: "actions" }, controls)),
    message, chart, note);
  async function load(poll) {
    let payload;
    try {
      payload = await api.panel(jobId, panel.name, panel.uses_k ? { ...params, k } : params, { poll });
    } catch (error) {
      payload = { empty: true, message: error instanceof ApiError ? error.message : "The server did not answer." };
    }
    node.dataset.state = payload.empty ? "empty" : "data";
    // k picks among the job's kernels: a job without any has nothing for it to pick
    if (kLabel) kLabel.hidden = payload.empty;
    if (payload.empty) {
      purgeChart(chart);
      chart.hidden = true;
      note.hidden = true;
      message.hidden = false;
      message.textContent = payload.message;
      return;
    }
    message.hidden = true;
    chart.hidden = false;
    note.hidden = !payload.note;
    note.textContent = payload.note || "";
    await drawChart(chart, payload);
  }
  return { node, load };
}

// As in SageMaker Profiler, the annotation is picked from the list or typed (a job may have
// hundreds of them).
const PICK_NOTE = "Pick or type an annotation recorded by the training script to see how its duration is distributed.";

// The annotation the field names: the text as it is, else as typed with stray spaces around it.
// A text field holds no line break (picking a name drops them, pasting one makes them spaces),
// so a name that has one is found by its text either way.
function pickedName(names, value) {
  const inField = (name, text) =>
    name.replace(/\r\n|[\r\n]/g, "") === text || name.replace(/\r\n|[\r\n]/g, " ") === text;
  return [value, value.trim()]
    .map((text) => names.find((name) => name === text) ?? names.find((name) => inField(name, text)))
    .find((name) => name !== undefined);
}

function customHistograms(jobId) {
  const choices = h("datalist", { id: "annotation-names" });
  const field = h("input", {
    id: "annotation-name", list: "annotation-names", "aria-label": "Annotation", autocomplete: "off",
    placeholder: "Annotation name", disabled: true,
  });
  const button = h("button", { class: "button primary", type: "button", id: "create-histogram", disabled: true }, "Create histogram");
  const grid = h("div", { class: "grid" });
  const reading = "Reading the job's annotation names…";
  const note = h("p", { class: "muted", id: "annotation-note" }, reading);
  const created = new Map();
  let names = [];
  const form = h("article", { class: "card wide" },
    h("div", { class: "card-head" }, h("h3", {}, "Create a new histogram"),
      h("div", { class: "actions" }, field, choices, button)),
    note);
  const node = h("div", {}, form, grid);
  let failure = null; // the notice in place of the note while the names could not be read
  // the names, read when the page opens and again at each refresh of a running job, which may
  // record new ones; a refresh changes the note only with whether there are any, so what it
  // says about a name typed stays
  async function readNames(poll) {
    const had = names.length > 0;
    names = (await api.annotations(jobId, { poll })).annotations;
    clear(choices).append(...names.map((n) => h("option", { value: n })));
    const none = names.length === 0;
    field.disabled = none;
    button.disabled = none;
    if (!poll || failure || had === none) {
      note.textContent = none
        ? "This job has no custom annotations. Annotate code in the training script (stepscope.annotate) to histogram its duration here."
        : PICK_NOTE;
    }
    failure?.replaceWith(note);
    failure = null;
  }
  async function init() {
    try {
      await readNames(false);
    } catch (error) {
      // the job may well have names: a notice in place of the note says they could not be read
      failure = failureNotice("The job's annotation names", error, () => {
        note.textContent = reading;
        failure.replaceWith(note);
        failure = null;
        init();
      });
      note.replaceWith(failure);
    }
  }
  async function create() {
    const name = pickedName(names, field.value);
    if (name === undefined) {
      const typed = field.value.trim();
      note.textContent = typed ? `This job has no annotation named “${typed}”. ${PICK_NOTE}` : PICK_NOTE;
      return;
    }
    note.textContent = PICK_NOTE;
    if (created.has(name)) return;
    const card = panelCard(jobId, { name: "annotation_histogram", title: name, uses_k: false }, {
      wide: false, params: { annotation: name }, title: `Histogram of “${name}”`,
      onRemove: () => created.delete(name),
    });
    created.set(name, card);
    grid.append(card.node);
    await card.load(false);
  }
  button.addEventListener("click", create);
  // Enter in the field does what the button does, as in a form
  field.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || event.isComposing) return;
    event.preventDefault();
    create();
  });
  const reload = async (poll) => {
    created.forEach((c) => c.load(poll).catch(() => {}));
    await readNames(poll);
  };
  return { node, init, reload };
}

// The status file says whether the rule triggered and how many violations it counted; as in the
// report, a rule that did not trigger counts 0.
function triggers(rule) {
  if (rule.triggered === undefined || rule.triggered === null) return "—";
  const count = rule.triggered ? rule.violations ?? 0 : 0;
  return `${count.toLocaleString()}${rule.datapoints ? ` of ${rule.datapoints.toLocaleString()}` : ""}`;
}

const RULE_CLASS = { IssuesFound: "issues", NoIssuesFound: "ok", InProgress: "progress", Error: "error", NotApplicable: "na", Stopped: "na" };
const RULE_LABEL = { IssuesFound: "Issues found", NoIssuesFound: "No issues found", InProgress: "In progress", Error: "Error", NotApplicable: "Not applicable", Stopped: "Stopped" };

async function renderRules(box, jobId, poll) {
  let data;
  try {
    data = await api.rules(jobId, { poll });
  } catch (error) {
    data = { rules: [], report_url: null, error: error.message };
  }
  clear(box).append(h("div", { class: "card-head" }, h("h3", {}, "Rule statuses"),
    data.report_url ? h("a", { class: "button", href: data.report_url, target: "_blank", rel: "noopener" }, "Open the profiling report") : null));
  if (!data.rules.length) {
    box.append(h("p", { class: "empty" }, data.error || "No rule results for this job yet. Rules run live while a job trains under “stepscope run”."));
    return;
  }
  box.append(h("table", { class: "table" },
    h("thead", {}, h("tr", {}, h("th", {}, "Rule"), h("th", {}, "Status"), h("th", {}, "Triggers"), h("th", {}, "Details"))),
    h("tbody", {}, data.rules.map((rule) => h("tr", { "data-rule": rule.rule },
      h("td", { class: "name" }, data.report_url ? h("a", { href: `${data.report_url}#rule-${encodeURIComponent(rule.rule)}`, target: "_blank", rel: "noopener" }, rule.rule) : rule.rule),
      h("td", {}, h("span", { class: `badge rule-${RULE_CLASS[rule.status] || "na"}` }, RULE_LABEL[rule.status] || rule.status)),
      h("td", { class: "nowrap" }, triggers(rule)),
      h("td", { class: "message" }, rule.message || ""))))));
}
