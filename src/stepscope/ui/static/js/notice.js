// What a page says when the server fails to give it something, or to do what it asks: what
// failed and why, with a Retry button that asks again. The rest of the page (its title, the
// navigation, what it shows already) stays usable around it.

import { h } from "./dom.js";

// `what` names what could not be read ("The timeline's tracks"), or what else `verb` says failed
// ("loaded"); `retry` asks again; `id` lets the page find the notice to replace or remove it.
export function failureNotice(what, error, retry, { id = null, verb = "read" } = {}) {
  return h("div", { class: "notice error", id, role: "alert" }, `${what} could not be ${verb}: ${error.message} `,
    h("button", { class: "button", type: "button", onclick: retry }, "Retry"));
}

// Shows `notice` in place of the page's notice with the same id (the last failure of the same
// read), or else just before `anchor`.
export function showNotice(notice, anchor) {
  const shown = notice.id ? document.getElementById(notice.id) : null;
  if (shown) shown.replaceWith(notice);
  else anchor.before(notice);
}
