// The Timeline page's place in the navigation: the timeline view is not part of this version.

import { clear, h } from "./dom.js";

export async function renderTimeline(main) {
  clear(main).append(
    h("header", { class: "page-head" }, h("h1", {}, "Timeline")),
    h("div", { class: "notice" },
      "The timeline (host and device tracks, kernels, annotations, launch-to-run connections) arrives with the timeline view in a later version of stepscope. ",
      "Until then, the ", h("a", { href: "/dashboard" }, "dashboard"),
      " summarises the loaded profile, and “stepscope export” writes a trace you can open in Perfetto."));
}
