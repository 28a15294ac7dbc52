// What a page says when the server fails to give it something: what could not be read and why,
// with a Retry button that asks again. The rest of the page (its title, the navigation, what it
// shows already) stays usable around it.

import { h } from "./dom.js";

// `what` names what could not be read ("The timeline's tracks"); `retry` asks again; `id` lets
// the page find the notice to replace or remove it.
export function failureNotice(what, error, retry, { id = null } = {}) {
  return h("div", { class: "notice error", id, role: "alert" }, `${what} could not be read: ${error.message} `,
    h("button", { class: "button", type: "button", onclick: retry }, "Retry"));
}
