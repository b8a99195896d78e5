// Try a job: a JobSpec typed (or loaded from an example asset) is checked ~400 ms after the
// last keystroke. JSON syntax is checked here (line and column), then the JobSpec's JSON
// Schema (the gateway's own, from its OpenAPI document: jobspec-schema.js); a JobSpec that
// breaks it is not sent. Everything else is the gateway's say, through the public API:
// POST /compute/placement ranks every resource (flavours
// chosen, rejected or outranked; the problems of the ones that cannot run, each with its
// field), and POST /compute/plan/{resource} returns each runnable resource's exact script.
// A Submit button sends the same JobSpec to POST /compute/job/{resource}. Every string goes
// in with textContent (dom.js), never as HTML.
import { ApiError, call } from "./api.js";
import { el, fill, say } from "./dom.js";
import { loadSchemaDocument, validate } from "./jobspec-schema.js";
import { expired, requireSignIn } from "./shell.js";

const DEBOUNCE_MS = 400;
const editor = document.getElementById("spec");
let timer = null;
let generation = 0;
let schemaDocument = null;
let schemaReady = Promise.resolve();

/** Line and column (1-based) of a character offset in `text`. */
function lineColumn(text, offset) {
  const before = text.slice(0, offset).split("\n");
  return { line: before.length, column: before[before.length - 1].length + 1 };
}

/** Where JSON.parse stopped: V8 names the line and column, or the offset, or the end. */
function syntaxPlace(text, message) {
  const named = /line (\d+) column (\d+)/.exec(message);
  if (named) return { line: Number(named[1]), column: Number(named[2]) };
  const at = /position (\d+)/.exec(message);
  return lineColumn(text, at ? Number(at[1]) : text.length);
}

function hideResults() {
  document.getElementById("problems").hidden = true;
  document.getElementById("placement-section").hidden = true;
}

/** A 422's problems, each attached to its field path. */
function problemItems(params) {
  return params.map((p) => el("li", { "data-field": p.name },
    el("code", { class: "field-path" }, p.name || "(body)"), ": ", p.reason,
    p.offered ? ` (offered: ${p.offered})` : ""));
}

function showProblems(heading, items) {
  document.getElementById("problems-heading").textContent = heading;
  fill(document.getElementById("problem-list"), items);
  document.getElementById("problems").hidden = false;
}

function showRefusal(error) {
  const params = (error.problem && error.problem.invalid_params) || [];
  showProblems("The gateway refuses this JobSpec", params.length ? problemItems(params)
    : [el("li", {}, error.detail || error.message)]);
}

/** Schema keywords the browser's validator met but does not implement: said, not skipped. */
function showUnchecked(unchecked) {
  say("schema-note", unchecked.length ? "Not checked in the browser (the gateway checks "
    + `them): ${unchecked.map((u) => `${u.keyword} at ${u.name}`).join(", ")}.` : "");
}

/** The JSON Schema check: true when the JobSpec passes it (or no schema could be had). */
function schemaAccepts(spec) {
  if (!schemaDocument) return true;
  let found;
  try {
    found = validate(schemaDocument, spec);
  } catch (error) {
    say("schema-note", `The JSON Schema check failed (${error.message}): only the gateway `
      + "checks this JobSpec.");
    return true;
  }
  const { errors, unchecked } = found;
  showUnchecked(unchecked);
  if (!errors.length) return true;
  hideResults();
  say("check-status", "Not sent: the JobSpec does not match its JSON Schema.");
  showProblems("The JobSpec breaks its JSON Schema", problemItems(errors));
  return false;
}

function facts(placement) {
  const rows = [
    ["runtime", placement.runtime], ["queue", placement.queue], ["image", placement.image],
    ["flavour", placement.flavour && `${placement.flavour} (priority ${placement.priority})`],
    ...Object.entries(placement.role_flavours || {}).map(([role, flavour]) =>
      [`role ${role} flavour`, flavour || "its image"]),
  ].filter(([, value]) => value !== null && value !== undefined);
  if (!rows.length) return null;
  return el("dl", { class: "facts" }, rows.flatMap(([name, value]) =>
    [el("dt", {}, name), el("dd", {}, String(value))]));
}

function flavourTable(flavours) {
  if (!flavours.length) return null;
  return el("table", { class: "jobs flavours" },
    el("caption", {}, "Image flavours"),
    el("thead", {}, el("tr", {}, ["flavour", "priority", "outcome", "why"].map((h) =>
      el("th", { scope: "col" }, h)))),
    el("tbody", {}, flavours.map((f) => el("tr", { "data-flavour": f.name },
      el("td", {}, f.name), el("td", {}, String(f.priority)),
      el("td", {}, el("span", { class: `flavour flavour-${f.status}` }, f.status)),
      el("td", { class: "message" }, f.reason || "")))));
}

/** Submits the JobSpec as checked (the one whose script is shown), not later edits. */
function submitButton(spec, resource) {
  const button = el("button", { type: "button", class: "submit", "data-resource": resource },
    `Submit to ${resource}`);
  button.addEventListener("click", () => submit(spec, resource, button));
  return button;
}

function resourceCard(spec, placement) {
  const id = placement.resource;
  const verdict = placement.runnable ? "can run" : "cannot run";
  const card = el("article", { class: `card placement ${placement.runnable ? "runnable"
    : "refused"}`, "data-resource": id, "aria-label": `${id}: ${verdict}` },
    el("h3", {}, el("span", { class: "resource-id" }, id), " ",
      el("span", { class: `verdict verdict-${placement.runnable ? "yes" : "no"}` }, verdict),
      " ", el("span", { class: "facility" }, `facility ${placement.facility}`)),
    facts(placement), flavourTable(placement.flavours || []));
  if (placement.warnings.length) {
    card.append(el("ul", { class: "warnings" }, placement.warnings.map((w) =>
      el("li", {}, `warning: ${w}`))));
  }
  if (!placement.runnable) {
    card.append(el("h4", {}, "Why not"),
      el("ol", { class: "problems reasons" }, problemItems(placement.problems)));
    return card;
  }
  const script = el("div", { class: "script" }, el("p", { class: "note" }, "planning…"));
  card.append(script, submitButton(spec, id));
  return card;
}

async function showPlan(spec, resource, card, mine) {
  const holder = card.querySelector(".script");
  try {
    const plan = await call(`/compute/plan/${encodeURIComponent(resource)}`,
      { method: "POST", body: spec });
    if (mine !== generation) return;
    fill(holder, el("h4", {}, `Batch script (${plan.scheduler}, runtime ${plan.runtime})`),
      el("pre", { class: "script-text", tabindex: "0",
        "aria-label": `Batch script for ${resource}` }, plan.script));
  } catch (error) {
    if (mine !== generation || expired(error)) return;
    const params = (error.problem && error.problem.invalid_params) || [];
    fill(holder, el("h4", {}, "The plan was refused"), el("ol", { class: "problems reasons" },
      params.length ? problemItems(params) : [el("li", {}, error.message)]));
    card.querySelector("button.submit").disabled = true;
  }
}

async function check() {
  const mine = ++generation;
  const text = editor.value;
  say("error", "");
  say("syntax", "");
  if (!text.trim()) {
    hideResults();
    say("check-status", "Write a JobSpec or pick an example.");
    return;
  }
  let spec;
  try {
    spec = JSON.parse(text);
  } catch (error) {
    hideResults();
    const { line, column } = syntaxPlace(text, error.message);
    say("check-status", "Not checked: the JSON does not parse.");
    say("syntax", `JSON syntax error at line ${line}, column ${column}: ${error.message}`);
    return;
  }
  await schemaReady;
  if (mine !== generation || !schemaAccepts(spec)) return;
  say("check-status", "Checking…");
  try {
    const placements = await call("/compute/placement", { method: "POST", body: spec });
    if (mine !== generation) return;
    document.getElementById("problems").hidden = true;
    const runnable = placements.filter((p) => p.runnable);
    document.getElementById("placement-summary").textContent =
      `${runnable.length} of ${placements.length} resource(s) can run it`
      + (runnable.length ? `; best first: ${runnable.map((p) => p.resource).join(", ")}.` : ".");
    const cards = placements.map((p) => resourceCard(spec, p));
    fill(document.getElementById("placements"), cards);
    document.getElementById("placement-section").hidden = false;
    await Promise.all(placements.map((p, i) => (p.runnable
      ? showPlan(spec, p.resource, cards[i], mine) : null)));
    if (mine === generation) say("check-status", "Checked.");
  } catch (error) {
    if (mine !== generation || expired(error)) return;
    hideResults();
    if (error instanceof ApiError && error.status === 422) {
      say("check-status", "The gateway refuses this JobSpec:");
      showRefusal(error);
    } else {
      say("check-status", "");
      say("error", error instanceof ApiError ? error.message : `Cannot check: ${error}`);
    }
  }
}

function schedule() {
  clearTimeout(timer);
  say("check-status", "Waiting for you to stop typing…");
  timer = setTimeout(check, DEBOUNCE_MS);
}

async function submit(spec, resource, button) {
  const project = document.getElementById("project").value;
  const inSpec = spec.attributes && spec.attributes.account;
  const submitted = document.getElementById("submitted");
  button.disabled = true;
  say("error", "");
  try {
    const job = await call(`/compute/job/${encodeURIComponent(resource)}`, {
      method: "POST", body: spec,
      headers: inSpec || !project ? {} : { "X-IRI-Facility-Project": project },
    });
    const link = el("a", { href: `/console/jobs?job=${encodeURIComponent(job.id)}`,
      id: "job-link" }, "its state and output on the Jobs page");
    fill(submitted, `Submitted to ${resource} as job ${job.id}: see `, link, ".");
    submitted.hidden = false;
    link.focus();
  } catch (error) {
    if (!expired(error)) say("error", `Submission to ${resource} refused: ${error.message}`);
  } finally {
    button.disabled = false;
  }
}

async function loadExample(name) {
  try {
    const response = await fetch(`/console/static/example-${name}.json`, { cache: "no-store" });
    if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
    editor.value = await response.text();
    editor.focus();
    clearTimeout(timer);
    await check();
  } catch (error) {
    say("error", `Cannot load the example ${name}: ${error.message}`);
  }
}

/** The JobSpec schema, once per page; without it the gateway alone checks (and the page
 * says so). */
async function loadSchema() {
  try {
    schemaDocument = await loadSchemaDocument();
  } catch (error) {
    say("schema-note", `The JobSpec schema could not be loaded (${error.message}): only the `
      + "gateway checks the JobSpec.");
  }
}

async function loadProjects() {
  const select = document.getElementById("project");
  try {
    const projects = await call("/account/projects");
    fill(select, projects.map((p) => el("option", { value: p.id }, p.id)));
  } catch (error) {
    expired(error);
  }
}

if (requireSignIn()) {
  document.getElementById("try-form").addEventListener("submit", (e) => e.preventDefault());
  for (const button of document.querySelectorAll("[data-example]")) {
    button.addEventListener("click", () => loadExample(button.dataset.example));
  }
  editor.addEventListener("input", schedule);
  loadProjects();
  schemaReady = loadSchema();
  say("check-status", "Write a JobSpec or pick an example.");
}
