// Array jobs on the jobs page (jobs.js): an array job is one row whose state cell counts its
// elements by state (meta_data.array.counts: one text badge per state, and a bar beside them
// for the eye only), and whose fold button ("▸ N elements") unfolds its elements. Unfolded,
// the job shows a page of 50 of them (GET /compute/job/{resource}/{id}/elements with offset,
// limit and state), a filter by state, the previous and next pages when there are more, and
// one row per element: its index, state, the scheduler's word, exit code, and a Cancel
// button while it has not ended (DELETE …/elements?indices=INDEX; a refusal is shown in the
// gateway's words, as a job's is). A shown page is read again when its job's document has
// changed (status.time) since, so each read of the jobs page (on the job event stream, which
// tells each element's moves as well as the array's, or the fallback refresh) brings the
// elements up to date, and costs nothing when they did not move.
import { ApiError, call } from "./api.js";
import { el, say } from "./dom.js";
import { expired } from "./shell.js";

const PAGE = 50;
const FILTERS = ["all", "queued", "active", "completed", "failed", "canceled"];
const ORDER = ["new", "queued", "held", "active", "completed", "failed", "canceled"];
const FINAL = new Set(["completed", "failed", "canceled"]);

const count = (n) => n.toLocaleString("en-US");

/** The elements' states in IRI's order, those with none left out: [[state, n], ...]. */
function byState(counts) {
  const known = ORDER.filter((state) => counts[state]);
  const other = Object.keys(counts).filter((state) => !ORDER.includes(state) && counts[state]);
  return [...known, ...other].map((state) => [state, counts[state]]);
}

/**
 * The array part of the jobs page. `stateCell(state)` is the page's state cell, `rerender()`
 * draws the page again, `reread()` reads the shown page of jobs again.
 */
export function arrayPart({ stateCell, rerender, reread }) {
  const views = new Map(); // job id -> {offset, state, page, error, readFor, asked}

  function viewOf(id) {
    if (!views.has(id)) {
      views.set(id, { offset: 0, state: "all", page: null, error: null, readFor: null,
        asked: 0 });
    }
    return views.get(id);
  }

  const elementsPath = (job) => `/compute/job/${encodeURIComponent(
    job.status.meta_data.resource_id)}/${encodeURIComponent(job.id)}/elements`;

  /** Read the job's shown page of elements, unless it was read since the job last changed. */
  async function read(job, again = false) {
    const view = viewOf(job.id);
    const wanted = JSON.stringify([job.status.time, view.offset, view.state]);
    if (!again && view.readFor === wanted) return;
    const mine = ++view.asked;
    const { state } = view;
    const params = new URLSearchParams({ offset: String(view.offset), limit: String(PAGE) });
    if (state !== "all") params.set("state", state);
    try {
      const page = await call(`${elementsPath(job)}?${params}`);
      if (mine !== view.asked) return; // a newer read (other page or filter) answers instead
      if (!page.elements.length && page.total && view.offset) {
        // Past the end now (elements left the filter): the last page instead.
        view.offset = Math.floor((page.total - 1) / PAGE) * PAGE;
        await read(job, true);
        return;
      }
      Object.assign(view, { page: { ...page, state }, error: null, readFor: wanted });
    } catch (error) {
      if (mine !== view.asked || expired(error)) return;
      Object.assign(view, { error: error instanceof ApiError ? error.detail : error.message,
        readFor: null });
    }
  }

  /** Show another page or filter of the job's elements (the shown one until it is read). */
  async function turn(job, change) {
    Object.assign(viewOf(job.id), change);
    await read(job);
    rerender();
  }

  async function cancelElement(job, name, index) {
    const params = new URLSearchParams({ indices: String(index) });
    try {
      await call(`${elementsPath(job)}?${params}`, { method: "DELETE" });
      say("job-notice", `Cancel of element ${index} of ${name} sent; its state follows below.`);
      await reread();
    } catch (error) {
      if (!expired(error)) say("error", `Cancel of element ${index} of ${name} refused: ${
        error.message}`);
    }
  }

  /** The job's elements counted by state, as text badges (and a bar, hidden from readers). */
  function counts(job) {
    const array = job.status.meta_data.array;
    if (!array) return null;
    const states = byState(array.counts || {});
    const bar = el("span", { class: "array-bar", "aria-hidden": "true" }, states.map(
      ([state, n]) => {
        const part = el("span", { class: `array-bar-part state-${state}` });
        part.style.flexGrow = String(n); // CSSOM: the page's CSP forbids style attributes
        return part;
      }));
    return el("span", { class: "array-counts" }, bar,
      el("ul", { class: "array-count-list", "aria-label": "elements by state" },
        states.map(([state, n]) => el("li", { class: `array-count state-${state}` },
          `${count(n)} ${state}`))));
  }

  /** The fold button of an array job ("▸ 500 elements"); null for any other job. */
  function fold(job, name, open) {
    const array = job.status.meta_data.array;
    if (!array) return null;
    return el("button", { type: "button", class: "fold", "aria-expanded": String(open),
      "data-key": `fold:${job.id}`, "aria-label": `${open ? "Fold" : "Unfold"} the ${
        count(array.count)} elements of ${name}` },
    `${open ? "▾" : "▸"} ${count(array.count)} elements`);
  }

  /** A button of the elements' pager: aria-disabled rather than disabled, so that the one
   * with the focus keeps it at the first or last page. */
  function pageButton(job, name, which, offset, usable) {
    const label = which === "previous" ? `Previous ${PAGE} elements of ${name}`
      : `Next ${PAGE} elements of ${name}`;
    const button = el("button", { type: "button", class: `elements-${which}`,
      "data-key": `elements-${which}:${job.id}`, "aria-label": label,
      "aria-disabled": String(!usable) }, which === "previous" ? "← Previous" : "Next →");
    button.addEventListener("click", () => {
      if (usable) turn(job, { offset });
    });
    return button;
  }

  /** What the shown page holds: "Showing 1-50 of 500 failed elements." */
  function shownText(view) {
    if (view.error) return `The elements are not readable: ${view.error}`;
    if (!view.page) return "Reading the elements…";
    const { total, offset, elements, state } = view.page;
    const which = state === "all" ? "" : `${state} `;
    if (!elements.length) return `No ${which}elements.`;
    return `Showing ${count(offset + 1)}-${count(offset + elements.length)} of ${
      count(total)} ${which}elements.`;
  }

  /** The row of the filter, the page's text and the pager, above the elements. */
  function controls(job, name, view) {
    const select = el("select", { class: "element-filter", "data-key": `elements-state:${job.id}`,
      "aria-label": `Elements in state, for ${name}` },
    FILTERS.map((state) => el("option", { value: state, selected: state === view.state },
      state === "all" ? "any state" : state)));
    select.addEventListener("change", () => turn(job, { state: select.value, offset: 0 }));
    const { total, offset } = view.page || { total: 0, offset: 0 };
    const paged = total > PAGE || offset > 0;
    return el("tr", { class: "elements-controls", "data-elements-of": job.id },
      el("td", { colspan: 6 },
        el("label", { class: "element-filter" }, "Elements in state ", select),
        el("span", { class: "elements-shown" }, shownText(view)),
        paged ? el("span", { class: "elements-pager" },
          pageButton(job, name, "previous", Math.max(0, offset - PAGE), offset > 0),
          pageButton(job, name, "next", offset + PAGE, offset + PAGE < total))
          : null));
  }

  function elementRow(job, name, element) {
    const cancel = FINAL.has(element.state) ? null
      : el("button", { type: "button", class: "cancel-element",
        "data-key": `cancel-element:${job.id}:${element.index}`,
        "aria-label": `Cancel element ${element.index} of ${name}` }, "Cancel");
    if (cancel) cancel.addEventListener("click", () => cancelElement(job, name, element.index));
    const exit = element.exit_code === null || element.exit_code === undefined ? null
      : el("span", { class: "exit-code" }, `exit code ${element.exit_code}`);
    return el("tr", { class: "element", "data-element-of": job.id, "data-index": element.index },
      el("td", {}, el("span", { class: "element-name" }, `element ${element.index}`)),
      el("td", {}, element.native_state ? `scheduler: ${element.native_state}` : ""),
      stateCell(element.state),
      el("td", {}, ""),
      el("td", { class: "message" }, exit),
      el("td", { class: "actions" }, cancel));
  }

  /** The rows of an unfolded array job: its controls, then the shown page of elements. */
  function rows(job, name) {
    const view = viewOf(job.id);
    const shown = view.page ? view.page.elements : [];
    return [controls(job, name, view), ...shown.map((e) => elementRow(job, name, e))];
  }

  return {
    counts,
    fold,
    rows,
    read,
    /** Whether JOB is an array job. */
    isArray: (job) => Boolean(job.status.meta_data.array),
    /** What is shown of the elements, for the page's check whether to draw again. */
    shown: () => [...views].map(([id, v]) => [id, v.offset, v.state, v.page, v.error]),
  };
}
