// Building elements without HTML strings: every text goes in as a text node (textContent),
// so a profile or user string such as "<img src=x onerror=...>" is shown, never parsed.

/**
 * A new element: `el("td", {class: "x", "data-id": id}, "text", otherElement)`.
 * Attribute values are set with setAttribute; children are nodes or strings (text nodes).
 */
export function el(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === false || value === null || value === undefined) continue;
    element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** Replace every child of `parent` with `children`. */
export function fill(parent, ...children) {
  parent.replaceChildren();
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) parent.append(child);
  }
}

/** Set the text of the element with this id (and show it when not empty). */
export function say(id, text) {
  const element = document.getElementById(id);
  element.textContent = text;
  element.hidden = !text;
}
