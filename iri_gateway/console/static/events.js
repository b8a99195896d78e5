// The caller's job events, live: GET /api/v2/compute/events (Server-Sent Events) read with
// fetch(), because EventSource cannot send the bearer token (nor the session's cookie alone). Parsed as the WHATWG standard
// says (CR, LF or CRLF line ends, comments, multi-line data, id, retry), with a bound on a
// line so a broken server cannot grow the page's memory. A dropped connection is opened
// again after the server's `retry` (doubled per failed attempt, at most a minute) with
// Last-Event-ID, so no change is missed. A server without the stream (404, 405: a plain IRI
// server) ends it for good: the page keeps refreshing by itself instead.
import { authentication } from "./api.js";

const MAX_LINE = 1024 * 1024;
const MAX_PAUSE_MS = 60000;

/**
 * Follow the stream. `onEvent(type, data)` for each event (data parsed), `onUp()` each time
 * the stream is open, `onDown(final)` when it is not (final: the server has no stream, or
 * refused the token). Returns a function that stops it.
 */
export function followEvents({ onEvent, onUp, onDown }) {
  const stop = new AbortController();
  let lastId = "";
  let retryMs = 2000;
  let failures = 0;

  async function connect() {
    const who = authentication("GET");
    const headers = { ...who.headers, Accept: "text/event-stream" };
    if (lastId) headers["Last-Event-ID"] = lastId;
    const response = await fetch("/api/v2/compute/events", {
      headers, cache: "no-store", credentials: who.credentials, signal: stop.signal,
    });
    const kind = (response.headers.get("Content-Type") || "").split(";")[0].trim();
    if (!response.ok || kind !== "text/event-stream") {
      return response.status === 429 || response.status >= 500 ? "retry" : "final";
    }
    failures = 0;
    onUp();
    await read(response.body.getReader());
    return "retry";
  }

  async function read(reader) {
    const decoder = new TextDecoder();
    let pending = "";
    let skipLf = false;
    let data = [];
    let type = "";
    let idBuffer = lastId;
    const line = (text) => {
      if (text === "") {
        lastId = idBuffer;
        if (data.length) {
          const payload = data.join("\n");
          const name = type || "message";
          data = [];
          type = "";
          try {
            onEvent(name, JSON.parse(payload));
          } catch (error) {
            console.warn("job event not understood", error);
          }
        }
        type = "";
        return;
      }
      if (text.startsWith(":")) return;
      const colon = text.indexOf(":");
      const field = colon < 0 ? text : text.slice(0, colon);
      let value = colon < 0 ? "" : text.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") data.push(value);
      else if (field === "event") type = value;
      else if (field === "id" && !value.includes("\0")) idBuffer = value;
      else if (field === "retry" && /^[0-9]+$/.test(value)) retryMs = Number(value);
    };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      let text = decoder.decode(value, { stream: true });
      if (!text) continue;
      if (skipLf && text.startsWith("\n")) text = text.slice(1);
      skipLf = text.endsWith("\r");
      const parts = (pending + text).split(/\r\n|\r|\n/);
      pending = parts.pop();
      if (pending.length > MAX_LINE) throw new Error("the event stream sent too long a line");
      parts.forEach(line);
    }
  }

  (async () => {
    while (!stop.signal.aborted) {
      let outcome;
      try {
        outcome = await connect();
      } catch (error) {
        if (stop.signal.aborted) return;
        outcome = "retry";
      }
      if (outcome === "final") {
        onDown(true);
        return;
      }
      onDown(false);
      const pause = Math.min(retryMs * 2 ** failures, MAX_PAUSE_MS);
      failures += 1;
      await new Promise((done) => setTimeout(done, pause));
    }
  })();
  return () => stop.abort();
}
