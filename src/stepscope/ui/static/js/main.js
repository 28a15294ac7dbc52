// Picks the page from the URL, marks it in the navigation, and renders it into <main>.

import { renderDashboard } from "./dashboard.js";
import { clear, h } from "./dom.js";
import { renderInfo } from "./info.js";
import { renderLoad } from "./load.js";
import { selectedJob, showJobInUrl } from "./selection.js";
import { renderSettings } from "./settings.js";
import { renderTimeline } from "./timeline/page.js";

const PAGES = {
  "/": ["load", renderLoad],
  "/dashboard": ["dashboard", renderDashboard],
  "/timeline": ["timeline", renderTimeline],
  "/info": ["info", renderInfo],
  "/settings": ["settings", renderSettings],
};

function start() {
  const [name, render] = PAGES[window.location.pathname] || PAGES["/"];
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.page === name);
    if (link.dataset.page === name) link.setAttribute("aria-current", "page");
  }
  // the URL and the links name the job shown, so a reload or another page keeps showing it
  const job = selectedJob();
  if (job) showJobInUrl(job);
  const main = document.getElementById("page");
  render(main).catch((error) => {
    clear(main).append(h("div", { class: "notice error" }, `This page could not be shown: ${error.message}`));
  });
}

start();
