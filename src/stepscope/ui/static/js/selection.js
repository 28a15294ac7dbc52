// Which loaded profile the dashboard, timeline and information pages show, and what those pages
// say while it cannot be shown.
//
// The page's URL names it (`?job=<id>`), and so do the navigation's links: a reload, a bookmark,
// back and forward, and every tab keep showing their own job, whatever is picked in another tab.
// The browser also remembers the last pick, for a page opened without a job in its URL.

import { api } from "./api.js";
import { h } from "./dom.js";
import { failureNotice } from "./notice.js";

const KEY = "stepscope.selectedJob";
const PARAM = "job";
const WAIT_MS = 1000;

export function selectedJob() {
  return new URLSearchParams(window.location.search).get(PARAM) || window.localStorage.getItem(KEY);
}

// The URL of the page at `path` showing the job `id`.
export function jobUrl(path, id) {
  return id ? `${path}?${PARAM}=${encodeURIComponent(id)}` : path;
}

// Names the job `id` (or none) in the page's URL and its navigation links, without a new
// history entry.
export function showJobInUrl(id) {
  const here = new URL(window.location.href);
  if (id) here.searchParams.set(PARAM, id);
  else here.searchParams.delete(PARAM);
  window.history.replaceState(window.history.state, "", here);
  for (const link of document.querySelectorAll("#nav a")) {
    link.setAttribute("href", jobUrl(new URL(link.href).pathname, id));
  }
}

export function selectJob(id) {
  window.localStorage.setItem(KEY, id);
  showJobInUrl(id);
}

// After `id` is unloaded: neither this page nor the browser's last pick names it any more.
export function forgetJob(id) {
  if (window.localStorage.getItem(KEY) === id) window.localStorage.removeItem(KEY);
  if (new URLSearchParams(window.location.search).get(PARAM) === id) showJobInUrl(null);
}

// The selected profile once it is loaded, or null. Until then a notice appended to `main` says
// why, the same on every page: nothing is selected, the job is not loaded (a link or bookmark
// to a job unloaded since: a button loads it), it is still loading (the page waits for it), or
// it failed to load (with the error), or its folder was removed or moved since it was loaded
// (the server says what is missing and what to do). `what` names what the page shows ("its
// timeline").
export async function loadedSelection(main, what) {
  const id = selectedJob();
  const notice = h("div", { class: "notice", id: "selection-notice" });
  main.append(notice);
  for (let poll = false; ; poll = true) {
    const profile = id ? (await answer(notice, "The list of loaded profiles", () => api.loaded({ poll }))).loaded.find((p) => p.id === id) : null;
    if (profile && profile.removed) {
      notice.className = "notice error";
      notice.replaceChildren(`${profile.removed} `, h("a", { href: "/" }, "Go to Load profile."));
      return null;
    }
    if (profile && profile.state === "loaded") {
      notice.remove();
      return profile;
    }
    if (!profile) {
      const listed = id ? (await answer(notice, "The list of training jobs", () => api.jobs({ poll }))).jobs.find((j) => j.id === id) : null;
      if (!listed) {
        notice.replaceChildren(id ? "The job this page names is not among this server's jobs. " : "No profile is selected. ",
          h("a", { href: "/" }, "Load a profile"), ` and pick it to see ${what}.`);
        return null;
      }
      await offerToLoad(notice, listed, what);
      continue;
    }
    if (profile.state === "error") {
      notice.className = "notice error";
      notice.replaceChildren(`“${profile.name}” could not be loaded: ${profile.error} `, h("a", { href: "/" }, "Go to Load profile."));
      return null;
    }
    notice.replaceChildren(`“${profile.name}” is still loading; ${what} appears here once it is loaded.`);
    await new Promise((resolve) => window.setTimeout(resolve, WAIT_MS));
  }
}

// Whether the loaded profile `id` can still be shown: not once its folder was removed or moved,
// or it was unloaded in another tab. A page that refreshes itself asks before each refresh, and
// then draws itself anew, to say why as it does on opening (its panels said it one by one).
export async function stillShown(id) {
  const profile = (await api.loaded({ poll: true })).loaded.find((p) => p.id === id);
  return profile?.state === "loaded" && !profile.removed;
}

// What `request` answers. While it fails, a notice in place of `notice` says so, and its Retry
// asks again, so the page goes on once the server answers.
async function answer(notice, what, request) {
  for (;;) {
    try {
      return await request();
    } catch (error) {
      await new Promise((retry) => {
        const failure = failureNotice(what, error, () => {
          failure.replaceWith(notice);
          retry();
        });
        notice.replaceWith(failure);
      });
    }
  }
}

// Says that `job` is not loaded and offers to load it; resolves once its loading started.
function offerToLoad(notice, job, what) {
  return new Promise((resolve) => {
    const button = h("button", { class: "button primary", type: "button", id: "load-selected" }, "Load it");
    button.addEventListener("click", () => {
      button.disabled = true;
      api.load(job.id).then(resolve, (error) => {
        notice.className = "notice error";
        notice.replaceChildren(`“${job.name}” could not be loaded: ${error.message} `, h("a", { href: "/" }, "Go to Load profile."));
      });
    });
    notice.replaceChildren(`“${job.name}” is not loaded. Load it to see ${what}, or `, h("a", { href: "/" }, "go to Load profile"), ". ", button);
  });
}
