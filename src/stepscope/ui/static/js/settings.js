// The Settings page: app auto shutdown (enabled or disabled, threshold in hours), saved on the server.

import { api, ApiError } from "./api.js";
import { clear, h } from "./dom.js";

export async function renderSettings(main) {
  const current = await api.settings();
  const enabled = h("select", { id: "auto-shutdown-enabled" },
    h("option", { value: "true", selected: current.auto_shutdown_enabled }, "Enabled"),
    h("option", { value: "false", selected: !current.auto_shutdown_enabled }, "Disabled"));
  const hours = h("input", {
    id: "auto-shutdown-hours", type: "number", min: "0", max: "720", step: "any",
    value: current.auto_shutdown_threshold_hours, disabled: !current.auto_shutdown_enabled,
  });
  enabled.addEventListener("change", () => { hours.disabled = enabled.value !== "true"; });
  const status = h("p", { class: "form-status", role: "status" });
  const save = h("button", { class: "button primary", type: "submit", id: "save-settings" }, "Save");
  const form = h("form", { class: "card form", novalidate: true },
    h("h2", {}, "App auto shutdown"),
    h("p", { class: "muted" }, "The Profiler UI stops by itself after this long without use. Background refreshes of a running job's dashboard or timeline do not count as use."),
    h("div", { class: "field" }, h("label", { for: "auto-shutdown-enabled" }, "Enable app auto shutdown"), enabled),
    h("div", { class: "field" }, h("label", { for: "auto-shutdown-hours" }, "Auto shutdown threshold in hours"), hours),
    h("div", { class: "form-actions" }, save, status));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.className = "form-status";
    try {
      const saved = await api.saveSettings({
        auto_shutdown_enabled: enabled.value === "true",
        auto_shutdown_threshold_hours: Number.parseFloat(hours.value),
      });
      hours.value = saved.auto_shutdown_threshold_hours;
      status.textContent = "Saved.";
      status.classList.add("ok");
    } catch (error) {
      status.textContent = error instanceof ApiError ? error.message : "Could not save the settings.";
      status.classList.add("error");
    }
  });
  clear(main).append(h("header", { class: "page-head" }, h("h1", {}, "Settings")), form);
}
