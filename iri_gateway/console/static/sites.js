// Sites side by side: the capabilities of every resource (one request, GET
// /compute/capabilities), one column per resource, one row per property.
// A row whose values are not all the same among the shown resources is marked "differs".
import { ApiError, call } from "./api.js";
import { el, fill, say } from "./dom.js";
import { expired, requireSignIn } from "./shell.js";

const NONE = "none";

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "no limit";
  const hours = Math.floor(seconds / 3600);
  const minutes = Math.round((seconds % 3600) / 60);
  if (hours && minutes) return `${hours} h ${minutes} min`;
  return hours ? `${hours} h` : `${minutes} min`;
}

function list(values) {
  return values && values.length ? values.join(", ") : NONE;
}

function yesNo(value) {
  return value ? "yes" : "no";
}

function fact(name) {
  return (cap) => {
    const value = cap.hardware[name];
    if (value === undefined || value === null) return NONE;
    return Array.isArray(value) ? list(value) : String(value);
  };
}

function queueText(queue) {
  if (!queue) return "not offered";
  return [queue.default ? "default" : null, `max ${duration(queue.max_walltime)}`,
    queue.default_walltime ? `default ${duration(queue.default_walltime)}` : null,
    queue.max_nodes ? `max ${queue.max_nodes} nodes` : "any node count"]
    .filter(Boolean).join(" · ");
}

function runtimeOf(cap, name) {
  return cap.runtimes.find((r) => r.name === name);
}

function runtimeRow(name, label, show) {
  return { label: `${name}: ${label}`, value: (cap) => {
    const runtime = runtimeOf(cap, name);
    return runtime ? show(runtime) : "not offered";
  } };
}

const SHOWN_FACTS = new Set(["gpu_count", "cpu_arch", "cpu_cores", "cpu_mhz", "memory_gib",
  "node_count", "runtime", "gpu_vendor", "gpu_model", "gpu_memory_gib", "nvidia_cuda", "rocm",
  "mpi"]);

/** The sections and rows of the comparison, for the resources loaded. */
function sections(caps) {
  const union = (pick) => [...new Set(caps.flatMap(pick))].sort();
  const queues = union((c) => c.queues.map((q) => q.name));
  const runtimes = union((c) => c.runtimes.map((r) => r.name));
  const otherFacts = union((c) => Object.keys(c.hardware)).filter((f) => !SHOWN_FACTS.has(f));
  return [
    { title: "Resource", rows: [
      { label: "facility", value: (c) => c.facility },
      { label: "name", value: (c) => c.name },
      { label: "description", value: (c) => c.description || NONE },
      { label: "scheduler", value: (c) => c.scheduler },
      { label: "connection", value: (c) => c.connection },
      { label: "example profile", value: (c) => yesNo(c.example_profile) },
    ] },
    { title: "Queues and limits", rows: [
      ...queues.map((name) => ({ label: `queue ${name}`,
        value: (c) => queueText(c.queues.find((q) => q.name === name)) })),
      { label: "custom scheduler attributes", value: (c) => list(c.allowed_custom_attributes) },
    ] },
    { title: "Nodes", rows: [
      { label: "nodes", value: fact("node_count") },
      { label: "CPU architecture", value: fact("cpu_arch") },
      { label: "cores per node", value: fact("cpu_cores") },
      { label: "CPU MHz", value: fact("cpu_mhz") },
      { label: "memory per node (GiB)", value: fact("memory_gib") },
      { label: "measured on this machine", value: (c) => list(c.detected) },
    ] },
    { title: "GPUs", rows: [
      { label: "GPUs per node", value: fact("gpu_count") },
      { label: "GPU vendor", value: fact("gpu_vendor") },
      { label: "GPU model", value: fact("gpu_model") },
      { label: "GPU memory (GiB)", value: fact("gpu_memory_gib") },
      { label: "CUDA", value: fact("nvidia_cuda") },
      { label: "ROCm", value: fact("rocm") },
      { label: "GPUs without a count", value: (c) => (c.gpu_default_request === "refuse"
        ? "refused" : "the whole node's GPUs") },
    ] },
    { title: "Container runtimes", rows: [
      { label: "runtimes", value: (c) => list(c.runtimes.map((r) => (r.default
        ? `${r.name} (default)` : r.name))) },
      ...runtimes.flatMap((name) => [
        runtimeRow(name, "GPU binding", (r) => r.gpu || NONE),
        runtimeRow(name, "CDI devices", (r) => list(r.cdi_devices)),
        runtimeRow(name, "MPI binding", (r) => r.mpi || NONE),
        runtimeRow(name, "image forms", (r) => list(r.image_forms)),
        runtimeRow(name, "mount sources", (r) => `${list(r.mount_sources)}${
          r.read_only_mounts === false ? " (read-write only: no read-only binds)"
            : r.read_write_mounts ? " (read-write allowed)" : " (read-only)"}`),
        runtimeRow(name, "networks", (r) => list(r.networks)),
        runtimeRow(name, "allowed extra options", (r) => list(r.allowed_extra_options)),
        runtimeRow(name, "image staging", (r) => r.image_staging),
      ]),
    ] },
    { title: "MPI", rows: [
      { label: "MPI flavour", value: (c) => (c.mpi ? c.mpi.flavour : NONE) },
      { label: "launcher", value: (c) => (c.mpi ? c.mpi.launcher : NONE) },
      { label: "launchers accepted", value: (c) => (c.mpi ? list(c.mpi.accepts) : NONE) },
    ] },
    { title: "Cluster jobs", rows: [
      { label: "cluster jobs", value: (c) => (c.cluster_jobs.enabled ? "run" : "refused") },
      { label: "roles at most", value: (c) => String(c.cluster_jobs.max_roles) },
      { label: "members at most", value: (c) => String(c.cluster_jobs.max_members) },
    ] },
    { title: "Other facts", rows: [
      ...otherFacts.map((name) => ({ label: name, value: fact(name) })),
      { label: "file roots", value: (c) => list(c.file_roots) },
    ] },
  ];
}

/** Does one of the runtime's allowed options (regular expressions) admit `option`? */
function allowsOption(cap, option) {
  const wanted = option.trim();
  if (!wanted) return true;
  return cap.runtimes.some((runtime) => runtime.allowed_extra_options.some((pattern) => {
    if (pattern.toLowerCase().includes(wanted.toLowerCase())) return true;
    try {
      return new RegExp(`^(?:${pattern})$`).test(wanted);
    } catch {
      return false;
    }
  }));
}

const FILTERS = {
  "filter-nvidia": (c) => String(c.hardware.gpu_vendor || "").toLowerCase() === "nvidia",
  "filter-amd": (c) => String(c.hardware.gpu_vendor || "").toLowerCase() === "amd",
  "filter-apptainer": (c) => c.runtimes.some((r) => r.name === "apptainer"),
  "filter-podman": (c) => c.runtimes.some((r) => r.name.startsWith("podman")),
  "filter-mpi": (c) => c.mpi !== null,
  "filter-cluster": (c) => c.cluster_jobs.enabled,
};

function shown(caps) {
  const option = document.getElementById("filter-option").value;
  const text = document.getElementById("filter-text").value.trim().toLowerCase();
  return caps.filter((cap) => Object.entries(FILTERS)
    .every(([id, test]) => !document.getElementById(id).checked || test(cap))
    && allowsOption(cap, option)
    && (!text || JSON.stringify(cap).toLowerCase().includes(text)));
}

function table(caps) {
  const head = el("tr", {}, el("th", { scope: "col", class: "corner" }, "property"),
    caps.map((c) => el("th", { scope: "col", "data-resource": c.resource },
      el("span", { class: "resource-id" }, c.resource),
      el("span", { class: "facility" }, c.facility))));
  const bodies = sections(caps).map((section) => {
    const rows = section.rows.map((row) => {
      const values = caps.map((c) => row.value(c));
      const differs = new Set(values).size > 1;
      return el("tr", { class: differs ? "differs" : null },
        el("th", { scope: "row" }, row.label,
          differs ? el("span", { class: "differs-mark" }, "differs") : null),
        values.map((value, i) => el("td", { "data-resource": caps[i].resource }, value)));
    });
    return el("tbody", {},
      el("tr", { class: "section" },
        el("th", { scope: "colgroup", colspan: caps.length + 1 }, section.title)),
      rows);
  });
  return el("table", { class: "compare" },
    el("caption", {}, `${caps.length} resource${caps.length === 1 ? "" : "s"} side by side`),
    el("thead", {}, head), bodies);
}

function render(all) {
  const caps = shown(all);
  // A first start serves only `local`: say how to get sites to compare.
  document.getElementById("count").textContent =
    `Showing ${caps.length} of ${all.length} resources.` + (all.length === 1
      ? ` Only ${all[0].resource} is loaded: to compare sites, start the `
        + "gateway with their profiles (iri-gateway serve --profiles DIR)." : "");
  const region = document.getElementById("comparison");
  if (!caps.length) {
    fill(region, el("p", { class: "note" }, "No resource matches these filters."));
    return;
  }
  fill(region, table(caps));
}

function load() {
  return call("/compute/capabilities");
}

if (requireSignIn()) {
  try {
    const all = await load();
    render(all);
    document.getElementById("filters").addEventListener("input", () => render(all));
    document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
    document.body.dataset.loaded = "true";
  } catch (error) {
    if (!expired(error)) {
      say("error", error instanceof ApiError
        ? `The gateway refused the request: ${error.message}`
        : `The gateway could not be reached: ${error.message}`);
    }
  }
}
