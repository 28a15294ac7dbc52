// The Load profile page: the loaded profiles (radio opens the dashboard, trash unloads) and the
// list of training jobs found under the server's roots (check boxes and Load).

import { api, ApiError } from "./api.js";
import { clear, h } from "./dom.js";
import { formatDuration, formatPlaces, formatStart, LOAD_LABEL, STATUS_LABEL, startTitle } from "./format.js";
import { failureNotice, showNotice } from "./notice.js";
import { forgetJob, jobUrl, selectedJob, selectJob } from "./selection.js";

const POLL_MS = 1000;

export async function renderLoad(main) {
  const loadedBox = h("section", { class: "card", id: "loaded-profiles" });
  const jobsBox = h("section", { class: "card", id: "job-list" });
  clear(main).append(
    h("header", { class: "page-head" }, h("div", {}, h("h1", {}, "Load profile"),
      h("p", { class: "lead" }, "Choose training jobs, load them, then pick one to open its dashboard."))),
    loadedBox,
    jobsBox,
  );
  let timer = null;
  // the jobs ticked, kept while a load polls the lists every second and draws them anew
  const ticked = new Set();
  async function refresh() {
    window.clearTimeout(timer);
    // loaded profiles first: a load that ends between the two answers then still shows as
    // loading in the first and is polled again, instead of leaving the list at "Loading…"
    let what = "The list of loaded profiles";
    let loaded, jobs, truncated;
    try {
      ({ loaded } = await api.loaded({ poll: true }));
      what = "The list of training jobs";
      ({ jobs, truncated } = await api.jobs({ poll: true }));
    } catch (error) {
      // the lists stay as they are, and the notice's Retry asks again
      showNotice(failureNotice(what, error, refresh, { id: "lists-error" }), loadedBox);
      return;
    }
    document.getElementById("lists-error")?.remove();
    const focused = focusedControl(main);
    renderLoaded(loadedBox, loaded, refresh);
    renderJobs(jobsBox, jobs, refresh, ticked, load);
    focused?.();
    if (truncated) {
      jobsBox.append(h("p", { class: "muted small" },
        `Only the newest ${jobs.length} jobs are listed. Start “stepscope ui” with a narrower folder to see the others.`));
    }
    if (loaded.some((p) => p.state === "loading")) timer = window.setTimeout(refresh, POLL_MS);
  }
  // Starts loading the `chosen` jobs. One the server refuses stays ticked, so Load asks again,
  // and a notice above the lists (which each poll draws anew) says which and why, with a Retry
  // that asks for it alone.
  async function load(chosen) {
    for (const job of chosen) {
      const id = `load-error-${job.id}`;
      document.getElementById(id)?.remove();
      try {
        await api.load(job.id);
        ticked.delete(job.id);
      } catch (error) {
        loadedBox.before(failureNotice(`“${job.name}”`, error, () => load([job]), { id, verb: "loaded" }));
      }
    }
    await refresh();
  }
  await refresh();
}

// Gives the focus back, once the lists are drawn anew, to the control that had it (a job's check
// box, radio button or trash icon, or a button), so a keyboard user goes on where they were.
function focusedControl(main) {
  const control = document.activeElement;
  if (!(control instanceof HTMLElement) || !main.contains(control)) return null;
  const row = control.closest("tr[data-job]");
  let selector = control.id ? `#${CSS.escape(control.id)}` : null;
  if (row) {
    const section = control.closest("section").id;
    selector = `#${section} tr[data-job="${CSS.escape(row.dataset.job)}"] ${control.tagName}[type="${control.getAttribute("type")}"]`;
  }
  return selector ? () => main.querySelector(selector)?.focus() : null;
}

function statusBadge(status) {
  return h("span", { class: `badge status-${status}` }, STATUS_LABEL[status] || status);
}

function renderLoaded(box, loaded, refresh) {
  clear(box).append(h("h2", {}, "Loaded profile"));
  if (!loaded.length) {
    box.append(h("p", { class: "muted" }, "No profile is loaded yet. Select jobs below and choose Load."));
    return;
  }
  const current = selectedJob();
  const radios = [];
  const open = (id) => {
    selectJob(id);
    window.location.assign(jobUrl("/dashboard", id));
  };
  // Picking a profile opens its dashboard, so the arrow keys only move among the profiles
  // (a radio group's arrows would pick, and so open, the next one); Enter or Space opens.
  const onkeydown = (event) => {
    const step = { ArrowDown: 1, ArrowRight: 1, ArrowUp: -1, ArrowLeft: -1 }[event.key];
    if (step) {
      event.preventDefault();
      const usable = radios.filter((r) => !r.disabled);
      usable[(usable.indexOf(event.target) + step + usable.length) % usable.length].focus();
    } else if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      open(event.target.value);
    }
  };
  const rows = loaded.map((profile) => {
    // the job's place under its root, with its name, tells apart two jobs of one name
    const named = `${profile.name} (${profile.location})`;
    // one the server refuses to unload stays listed, and a notice above the lists says why
    const unload = async () => {
      const id = `unload-error-${profile.id}`;
      document.getElementById(id)?.remove();
      try {
        await api.unload(profile.id);
      } catch (error) {
        // unloaded already (in another tab): what the click asks for is done
        if (!(error instanceof ApiError && error.status === 404)) {
          box.before(failureNotice(`“${profile.name}”`, error, unload, { id, verb: "unloaded" }));
          return;
        }
      }
      forgetJob(profile.id);
      await refresh();
    };
    const radio = h("input", {
      type: "radio",
      name: "selected-profile",
      value: profile.id,
      "aria-label": `Open the dashboard of ${named}`,
      checked: profile.id === current,
      disabled: profile.state !== "loaded",
      // a click, not a change: the profile shown last is picked already, and a click on it
      // changes nothing, yet opens its dashboard again
      onclick: () => open(profile.id),
      onkeydown,
    });
    radios.push(radio);
    const trash = h("button", {
      class: "icon-button",
      type: "button",
      title: `Unload ${named}`,
      "aria-label": `Unload ${named}`,
      onclick: unload,
    }, trashIcon());
    const state = profile.state === "error"
      ? h("span", { class: "badge load-error", title: profile.error }, "Error")
      : h("span", { class: `badge load-${profile.state}` }, LOAD_LABEL[profile.state]);
    return h("tr", { "data-job": profile.id },
      h("td", { class: "narrow" }, radio),
      h("td", { class: "name" }, profile.name, h("div", { class: "muted small" }, profile.location)),
      h("td", {}, statusBadge(profile.status)),
      h("td", {}, state, profile.state === "error" || profile.removed
        ? h("div", { class: "muted small" }, profile.removed || profile.error) : null),
      h("td", { class: "narrow right" }, trash));
  });
  // in a narrow window the list scrolls sideways in its card, as the list of jobs does: the page
  // grew wider than the window, the trash icons past its edge
  box.append(h("div", { class: "scroll" }, h("table", { class: "table" },
    h("thead", {}, h("tr", {}, h("th", { class: "narrow" }, ""), h("th", {}, "Job name"), h("th", {}, "Job status"),
      h("th", {}, "Load status"), h("th", { class: "narrow" }, ""))),
    h("tbody", {}, rows))));
}

function renderJobs(box, jobs, refresh, ticked, load) {
  const loadButton = h("button", { class: "button primary", type: "button", disabled: true, id: "load-button" }, "Load");
  clear(box).append(h("div", { class: "card-head" },
    h("h2", {}, "List of training jobs"),
    h("div", { class: "actions" },
      h("button", { class: "button", type: "button", id: "refresh-button", onclick: refresh }, "Refresh"), loadButton)));
  if (!jobs.length) {
    box.append(h("p", { class: "muted" },
      "No training jobs were found under the folders this server was started with. ",
      "Run a job with “stepscope run”, or start “stepscope ui” with a folder that holds jobs or PyTorch profiler traces."));
    return;
  }
  const boxes = [];
  const update = () => { loadButton.disabled = !boxes.some((b) => b.checked); };
  const rows = jobs.map((job) => {
    const loadable = job.load_state !== "loaded" && job.load_state !== "loading";
    if (!loadable) ticked.delete(job.id);
    const check = h("input", {
      type: "checkbox",
      value: job.id,
      "aria-label": `Select ${job.name}`,
      disabled: !loadable,
      checked: ticked.has(job.id),
      onchange: () => {
        if (check.checked) ticked.add(job.id);
        else ticked.delete(job.id);
        update();
      },
    });
    boxes.push(check);
    return h("tr", { "data-job": job.id },
      h("td", { class: "narrow" }, check),
      h("td", { class: "name" }, job.name, h("div", { class: "muted small" }, kindLabel(job.kind), " · ", job.location)),
      h("td", {}, statusBadge(job.status)),
      h("td", { class: "nowrap", title: startTitle(job) }, formatStart(job)),
      h("td", { class: "nowrap" }, formatDuration(job.duration_s)),
      h("td", {}, formatPlaces(job) || "—"),
      h("td", {}, h("span", { class: `badge load-${job.load_state}` }, LOAD_LABEL[job.load_state] || job.load_state)));
  });
  // in a narrow window the list scrolls sideways in its card, not the whole page with it
  box.append(h("div", { class: "scroll" }, h("table", { class: "table" },
    h("thead", {}, h("tr", {}, h("th", { class: "narrow" }, ""), h("th", {}, "Training job"), h("th", {}, "Status"),
      h("th", {}, "Start"), h("th", {}, "Duration"), h("th", {}, "Nodes"), h("th", {}, "Load status"))),
    h("tbody", {}, rows))));
  update();
  loadButton.addEventListener("click", () => {
    loadButton.disabled = true;
    load(jobs.filter((job, i) => boxes[i].checked));
  });
}

function kindLabel(kind) {
  return { stepscope: "stepscope job", sagemaker: "SageMaker Debugger output", kineto: "PyTorch profiler trace" }[kind] || kind;
}

function trashIcon() {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("width", "18");
  svg.setAttribute("height", "18");
  svg.setAttribute("aria-hidden", "true");
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", "M9 3h6l1 2h4v2H4V5h4l1-2zm-3 6h12l-1 12H7L6 9zm4 2v8h2v-8h-2zm4 0v8h2v-8h-2z");
  path.setAttribute("fill", "currentColor");
  svg.append(path);
  return svg;
}
