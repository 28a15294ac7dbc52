// The Information page: what is known about the selected loaded profile, as titled sections.

import { api } from "./api.js";
import { clear, h } from "./dom.js";
import { failureNotice } from "./notice.js";
import { loadedSelection } from "./selection.js";

export async function renderInfo(main) {
  clear(main).append(h("header", { class: "page-head" }, h("h1", {}, "Information")));
  const loaded = await loadedSelection(main, "its hosts, hardware, ranks, versions and configuration");
  if (!loaded) return;
  let info;
  try {
    info = await api.info(loaded.id);
  } catch (error) {
    main.querySelector("h1").textContent = `Information · ${loaded.name}`;
    main.append(failureNotice("The profile's information", error, () => renderInfo(main)));
    return;
  }
  main.querySelector("h1").textContent = `Information · ${info.name}`;
  const grid = h("div", { class: "grid info-grid" });
  for (const section of info.sections) {
    const wide = section.table || section.rows.length > 12 || section.title === "Profiler configuration";
    const card = h("section", { class: `card${wide ? " wide" : ""}`, "data-section": section.title }, h("h2", {}, section.title));
    if (section.table) {
      card.append(h("div", { class: "scroll" }, h("table", { class: "table" },
        h("thead", {}, h("tr", {}, section.columns.map((c) => h("th", {}, c)))),
        h("tbody", {}, section.table.map((row) => h("tr", {}, row.map((v) => h("td", {}, String(v)))))))));
    } else if (section.rows.length) {
      card.append(h("dl", { class: "facts" }, section.rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))])));
    } else {
      card.append(h("p", { class: "muted" }, "Nothing recorded."));
    }
    grid.append(card);
  }
  main.append(grid);
}
