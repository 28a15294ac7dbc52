// How times, durations and statuses read on every page.

// In UTC and saying so, as the Information page and the profiling report give times.
export function formatTime(us) {
  if (us === null || us === undefined) return "—";
  const date = new Date(us / 1000);
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getUTCFullYear()}-${pad(date.getUTCMonth() + 1)}-${pad(date.getUTCDate())} ${pad(date.getUTCHours())}:${pad(date.getUTCMinutes())}:${pad(date.getUTCSeconds())} UTC`;
}

// A trace cut before its baseTimeNanoseconds keeps its own clock: its times are no dates (read
// as dates, they said 1970), only its duration is known.
export const OWN_CLOCK = "The trace has no date: its times are on its own clock (a trace cut short loses the key that dates it), so only its duration is known.";

// When a job started, or why that is not known.
export function formatStart(job) {
  return job.own_clock ? "— (no date in the trace)" : formatTime(job.start_us);
}

export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (seconds < 1) return `${(seconds * 1000).toFixed(0)} ms`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${Math.round(seconds % 60)} s`;
  const hours = Math.floor(minutes / 60);
  return `${hours} h ${minutes % 60} min`;
}

export const STATUS_LABEL = {
  running: "Running",
  completed: "Completed",
  failed: "Failed",
  stopped: "Stopped",
  unknown: "Unknown",
};

export const LOAD_LABEL = {
  not_loaded: "Not loaded",
  loading: "Loading…",
  loaded: "Loaded",
  error: "Error",
};
