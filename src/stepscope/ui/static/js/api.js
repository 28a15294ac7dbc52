// The JSON API of the server (documented in docs/ui.md). Background polls carry a header so they
// do not count as activity for auto shutdown.

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail || `request failed (${status})`);
    this.status = status;
  }
}

async function request(method, path, { body, poll = false } = {}) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (poll) headers["X-Stepscope-Poll"] = "1";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  if (response.status === 204) return null;
  let payload = null;
  try {
    payload = await response.json();
  } catch {
    payload = null;
  }
  if (!response.ok) {
    const detail = payload && typeof payload.detail === "string" ? payload.detail : null;
    throw new ApiError(response.status, detail);
  }
  return payload;
}

const job = (id) => `/api/jobs/${encodeURIComponent(id)}`;

export const api = {
  jobs: (opts) => request("GET", "/api/jobs", opts),
  loaded: (opts) => request("GET", "/api/loaded", opts),
  load: (id) => request("POST", `${job(id)}/load`),
  unload: (id) => request("DELETE", `${job(id)}/load`),
  panels: () => request("GET", "/api/panels"),
  panel: (id, name, params = {}, opts) => {
    const query = new URLSearchParams(params).toString();
    return request("GET", `${job(id)}/dashboard/${encodeURIComponent(name)}${query ? `?${query}` : ""}`, opts);
  },
  annotations: (id, opts) => request("GET", `${job(id)}/annotations`, opts),
  rules: (id, opts) => request("GET", `${job(id)}/rules`, opts),
  info: (id) => request("GET", `${job(id)}/info`),
  settings: () => request("GET", "/api/settings"),
  saveSettings: (settings) => request("PUT", "/api/settings", { body: settings }),
};
