// Which loaded profile the dashboard, timeline and information pages show (kept in the browser
// only), and what those pages say while it cannot be shown.

import { api } from "./api.js";
import { h } from "./dom.js";

const KEY = "stepscope.selectedJob";
const WAIT_MS = 1000;

export function selectedJob() {
  return window.localStorage.getItem(KEY);
}

export function selectJob(id) {
  if (id) window.localStorage.setItem(KEY, id);
  else window.localStorage.removeItem(KEY);
}

// The selected profile once it is loaded, or null. Until then a notice appended to `main` says
// why, the same on every page: nothing is selected, it is still loading (the page waits for
// it), or it failed to load (with the error). `what` names what the page shows ("its timeline").
export async function loadedSelection(main, what) {
  const id = selectedJob();
  const notice = h("div", { class: "notice", id: "selection-notice" });
  main.append(notice);
  for (let poll = false; ; poll = true) {
    const profile = id ? (await api.loaded({ poll })).loaded.find((p) => p.id === id) : null;
    if (profile && profile.state === "loaded") {
      notice.remove();
      return profile;
    }
    if (!profile) {
      notice.replaceChildren("No profile is selected. ", h("a", { href: "/" }, "Load a profile"), ` and pick it to see ${what}.`);
      return null;
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
