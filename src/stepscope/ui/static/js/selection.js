// Which loaded profile the dashboard and information pages show (kept in the browser only).

const KEY = "stepscope.selectedJob";

export function selectedJob() {
  return window.localStorage.getItem(KEY);
}

export function selectJob(id) {
  if (id) window.localStorage.setItem(KEY, id);
  else window.localStorage.removeItem(KEY);
}
