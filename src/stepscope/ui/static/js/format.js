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

// A newer trace dates its events only at its end, which listing a compressed one does not read:
// until it is loaded, the job list shows and orders it by when its file was written.
const UNDATED = "Not loaded yet: the trace dates its events only at its end, so the list orders it by when its file was written; loading it reads its start.";
const awaitsItsDate = (job) => job.start_us === null && Boolean(job.written_us) && job.load_state !== "loaded";

// A loaded job still without a start has no record in its data to date it (a trace of no
// events): the pages say so where its start would be.
export const NO_RECORDS = "No events or metrics";
export const holdsNoRecords = (job) => job.start_us === null && !job.own_clock && job.load_state === "loaded";

// When a job started, or why that is not known.
export function formatStart(job) {
  if (job.own_clock) return "— (no date in the trace)";
  if (awaitsItsDate(job)) return `— (file written ${formatTime(job.written_us)})`;
  if (holdsNoRecords(job)) return NO_RECORDS;
  return formatTime(job.start_us);
}

// What the start of a job in the job list means, when it is not simply its start.
export function startTitle(job) {
  return job.own_clock ? OWN_CLOCK : awaitsItsDate(job) ? UNDATED : null;
}

// Where a job ran: its nodes, else (a PyTorch profiler trace) its ranks, one per trace file, as
// their headers or file names give them: "rank 3 of 8", "2 of 128 ranks", "2 ranks". With
// `count`, how many nodes ("2 nodes") rather than their names.
export function formatPlaces(job, { count = false } = {}) {
  const nodes = job.nodes || [];
  if (nodes.length) return count ? `${nodes.length} node${nodes.length > 1 ? "s" : ""}` : nodes.join(", ");
  const ranks = job.ranks || [];
  if (!ranks.length) return "";
  const of = job.world_size > ranks.length ? ` of ${job.world_size}` : "";
  if (ranks.length === 1) return ranks[0] === null ? "1 rank" : `rank ${ranks[0]}${of}`;
  return `${ranks.length}${of} ranks`;
}

// Each unit is chosen by the value as rounded for display, so 119.6 s reads "2 min 0 s", not
// "1 min 60 s" (nor 59.96 s "60.0 s", nor 0.9996 s "1000 ms").
export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  if (Math.round(seconds * 1000) < 1000) return `${Math.round(seconds * 1000)} ms`;
  if (Math.round(seconds * 10) < 600) return `${seconds.toFixed(1)} s`;
  const whole = Math.round(seconds);
  const minutes = Math.floor(whole / 60);
  if (minutes < 60) return `${minutes} min ${whole % 60} s`;
  const wholeMinutes = Math.round(seconds / 60);
  return `${Math.floor(wholeMinutes / 60)} h ${wholeMinutes % 60} min`;
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
