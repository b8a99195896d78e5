// The JobSpec's JSON Schema, checked in the browser as the user types: a small validator of
// the JSON Schema 2020-12 keywords the gateway's own schema uses, so a wrong type, an unknown
// field or a value out of bounds is named at once, field by field, before any request.
// The schema is not a copy: it is the gateway's OpenAPI document (GET /openapi.json), the
// same one every client reads, so it cannot drift from the JobSpec model. The gateway stays
// the final judge (rules no schema states, e.g. unique role names, are its alone). A keyword
// this validator does not implement is never passed silently: it is returned as `unchecked`.

/** Where the JobSpec schema lives in the OpenAPI document. */
export const JOBSPEC_REF = "#/components/schemas/JobSpec";

/** Keywords that only describe (JSON Schema annotations): nothing to check. */
const ANNOTATIONS = new Set(["title", "description", "default", "examples", "deprecated",
  "readOnly", "writeOnly", "$comment"]);

const TYPE_NAMES = { integer: "an integer", number: "a number", string: "a string",
  boolean: "a boolean", object: "an object", array: "a list", null: "null" };

/** The gateway's OpenAPI document, whose components hold the JobSpec schema. */
export async function loadSchemaDocument() {
  const response = await fetch("/openapi.json", { credentials: "omit" });
  if (!response.ok) throw new Error(`GET /openapi.json: ${response.status}`);
  return response.json();
}

/** A location as the gateway's problems name it: `container.volume_mounts[0].source`. */
export function fieldPath(parts) {
  let text = "";
  for (const part of parts) {
    if (typeof part === "number") text += `[${part}]`;
    else if (part === "") text += '[""]';
    else text += text ? `.${part}` : part;
  }
  return text || "(document)";
}

/** The JSON type of a parsed value, as JSON Schema names it ("integer" for whole numbers). */
function jsonType(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

function hasType(value, type) {
  const actual = jsonType(value);
  return actual === type || (type === "number" && actual === "integer");
}

function described(value) {
  const type = jsonType(value);
  if (type === "string") return `the text ${JSON.stringify(value)}`;
  if (type === "integer" || type === "number" || type === "boolean") return String(value);
  return TYPE_NAMES[type];
}

/** "must be …" for a list of JSON Schema type names. */
function mustBe(types, value) {
  const names = types.length === 1 && types[0] === "boolean" ? ["true or false"]
    : types.map((t) => TYPE_NAMES[t]);
  return `must be ${listed(names)}, not ${described(value)}`;
}

function listed(words) {
  return words.length < 2 ? words.join("") : `${words.slice(0, -1).join(", ")} or ${words.at(-1)}`;
}

/** Unicode code points, as JSON Schema (and Python) count a string's length. */
function length(text) {
  return [...text].length;
}

/** Edit distance, for naming the known fields closest to an unknown one. */
function distance(a, b) {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i += 1) {
    const row = [i];
    for (let j = 1; j <= b.length; j += 1) {
      row.push(Math.min(previous[j] + 1, row[j - 1] + 1,
        previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1)));
    }
    previous = row;
  }
  return previous[b.length];
}

/** Up to three known names close to `name` (typos, or a prefix of a known name). */
export function closest(name, known) {
  const lower = name.toLowerCase();
  return known
    .map((k) => ({ k, d: distance(lower, k.toLowerCase()) }))
    .filter(({ k, d }) => d <= Math.max(2, Math.floor(k.length / 3))
      || (lower.length >= 3 && k.toLowerCase().startsWith(lower)))
    .sort((x, y) => x.d - y.d || x.k.localeCompare(y.k))
    .slice(0, 3)
    .map(({ k }) => k);
}

class Checker {
  constructor(root) {
    this.root = root;
    this.errors = [];
    this.unchecked = new Map();
  }

  resolve(ref) {
    if (!ref.startsWith("#/")) throw new Error(`only local $ref are supported, not ${ref}`);
    let node = this.root;
    for (const raw of ref.slice(2).split("/")) {
      const key = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
      if (node === null || typeof node !== "object" || !(key in node)) {
        throw new Error(`the schema's $ref ${ref} leads nowhere`);
      }
      node = node[key];
    }
    return node;
  }

  /** The types a schema admits at its top (following $ref and anyOf/oneOf), for messages. */
  types(schema) {
    if (schema.$ref) return this.types(this.resolve(schema.$ref));
    if (schema.type) return [].concat(schema.type);
    const branches = schema.anyOf || schema.oneOf;
    return branches ? branches.flatMap((b) => this.types(b)) : [];
  }

  /** A keyword met at `path` that this validator cannot apply: said, never passed. */
  cannot(keyword, path) {
    this.unchecked.set(`${keyword} at ${fieldPath(path)}`, { keyword, name: fieldPath(path),
      path });
  }

  fail(path, reason, keyword) {
    this.errors.push({ path, name: fieldPath(path), reason, keyword });
  }

  /** Errors of `value` against `schema` at `path`, in a scratch list (for anyOf branches). */
  trial(schema, value, path) {
    const saved = this.errors;
    this.errors = [];
    this.check(schema, value, path);
    const found = this.errors;
    this.errors = saved;
    return found;
  }

  check(schema, value, path) {
    if (schema === true) return;
    if (schema === false) {
      this.fail(path, "no value is allowed here", "false");
      return;
    }
    for (const keyword of Object.keys(schema)) {
      if (!ANNOTATIONS.has(keyword) && !Object.hasOwn(KEYWORDS, keyword)) {
        this.cannot(keyword, path);
      }
    }
    if (schema.type !== undefined) {
      const types = [].concat(schema.type);
      if (!types.some((t) => hasType(value, t))) {
        this.fail(path, mustBe(types, value), "type");
        return; // the other keywords would only repeat it
      }
    }
    for (const [keyword, apply] of Object.entries(KEYWORDS)) {
      if (keyword in schema && keyword !== "type") apply(this, schema, value, path);
    }
  }

  /** anyOf/oneOf: the branches that admit the value's type decide what to say. */
  alternatives(branches, value, path, exactlyOne) {
    const results = branches.map((b) => this.trial(b, value, path));
    const passing = results.filter((r) => r.length === 0).length;
    if (exactlyOne ? passing === 1 : passing > 0) return;
    if (passing > 1) {
      this.fail(path, "matches more than one of the allowed forms", "oneOf");
      return;
    }
    const fitting = branches.map((b, i) => [b, results[i]])
      .filter(([b]) => this.types(b).some((t) => hasType(value, t)));
    if (fitting.length === 1) {
      this.errors.push(...fitting[0][1]);
      return;
    }
    const types = [...new Set(branches.flatMap((b) => this.types(b)))];
    this.fail(path, types.length && !fitting.length
      ? mustBe(types, value) : "matches none of the allowed forms", exactlyOne ? "oneOf" : "anyOf");
  }
}

const isObject = (v) => jsonType(v) === "object";


/** Each implemented keyword: how it checks a value (after `type` has passed). */
const KEYWORDS = {
  type() {},
  $ref(c, s, v, p) { c.check(c.resolve(s.$ref), v, p); },
  anyOf(c, s, v, p) { c.alternatives(s.anyOf, v, p, false); },
  oneOf(c, s, v, p) { c.alternatives(s.oneOf, v, p, true); },
  allOf(c, s, v, p) { for (const b of s.allOf) c.check(b, v, p); },
  not(c, s, v, p) {
    if (c.trial(s.not, v, p).length) return; // the forbidden form does not match: fine
    const together = s.not.required;
    c.fail(p, together ? `must not give ${together.join(" and ")} together (one name only)`
      : "is a form this field forbids", "not");
  },
  enum(c, s, v, p) {
    if (!s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) {
      c.fail(p, `must be one of ${s.enum.map((e) => JSON.stringify(e)).join(", ")}, not `
        + described(v), "enum");
    }
  },
  const(c, s, v, p) {
    if (JSON.stringify(s.const) !== JSON.stringify(v)) {
      c.fail(p, `must be ${JSON.stringify(s.const)}`, "const");
    }
  },
  minimum(c, s, v, p) {
    if (typeof v === "number" && v < s.minimum) {
      c.fail(p, `must be at least ${s.minimum}`, "minimum");
    }
  },
  maximum(c, s, v, p) {
    if (typeof v === "number" && v > s.maximum) {
      c.fail(p, `must be at most ${s.maximum}`, "maximum");
    }
  },
  exclusiveMinimum(c, s, v, p) {
    if (typeof v === "number" && v <= s.exclusiveMinimum) {
      c.fail(p, `must be more than ${s.exclusiveMinimum}`, "exclusiveMinimum");
    }
  },
  exclusiveMaximum(c, s, v, p) {
    if (typeof v === "number" && v >= s.exclusiveMaximum) {
      c.fail(p, `must be less than ${s.exclusiveMaximum}`, "exclusiveMaximum");
    }
  },
  minLength(c, s, v, p) {
    if (typeof v !== "string" || length(v) >= s.minLength) return;
    c.fail(p, s.minLength === 1 ? "must not be empty"
      : `must be at least ${s.minLength} characters long`, "minLength");
  },
  maxLength(c, s, v, p) {
    if (typeof v === "string" && length(v) > s.maxLength) {
      c.fail(p, `must be at most ${s.maxLength} characters long (it has ${length(v)})`,
        "maxLength");
    }
  },
  pattern(c, s, v, p) {
    if (typeof v !== "string") return;
    let expression;
    try {
      expression = new RegExp(s.pattern, "u");
    } catch {
      c.cannot(`pattern ${s.pattern} (not a JavaScript regular expression)`, p);
      return;
    }
    if (!expression.test(v)) {
      c.fail(p, `must match the pattern ${s.pattern}`
        + (s.description ? ` (${s.description})` : ""), "pattern");
    }
  },
  items(c, s, v, p) {
    if (Array.isArray(v)) v.forEach((item, i) => c.check(s.items, item, [...p, i]));
  },
  minItems(c, s, v, p) {
    if (Array.isArray(v) && v.length < s.minItems) {
      c.fail(p, s.minItems === 1 ? "must not be empty"
        : `must have at least ${s.minItems} items`, "minItems");
    }
  },
  maxItems(c, s, v, p) {
    if (Array.isArray(v) && v.length > s.maxItems) {
      c.fail(p, `must have at most ${s.maxItems} items (it has ${v.length})`, "maxItems");
    }
  },
  required(c, s, v, p) {
    if (!isObject(v)) return;
    for (const name of s.required) {
      if (!Object.hasOwn(v, name)) c.fail([...p, name], "required field is missing", "required");
    }
  },
  properties(c, s, v, p) {
    if (!isObject(v)) return;
    for (const [name, sub] of Object.entries(s.properties)) {
      if (Object.hasOwn(v, name)) c.check(sub, v[name], [...p, name]);
    }
  },
  additionalProperties(c, s, v, p) {
    if (!isObject(v)) return;
    const known = Object.keys(s.properties || {});
    for (const name of Object.keys(v).filter((k) => !known.includes(k))) {
      if (s.additionalProperties === false) {
        const near = closest(name, known);
        c.fail([...p, name], "unknown field; the JobSpec does not define it"
          + (near.length ? ` (did you mean ${listed(near)}?)` : ""), "additionalProperties");
      } else {
        c.check(s.additionalProperties, v[name], [...p, name]);
      }
    }
  },
  propertyNames(c, s, v, p) {
    if (!isObject(v)) return;
    for (const name of Object.keys(v)) {
      for (const error of c.trial(s.propertyNames, name, [...p, name])) {
        c.fail(error.path, `field name ${error.reason}`, "propertyNames");
      }
    }
  },
  minProperties(c, s, v, p) {
    if (isObject(v) && Object.keys(v).length < s.minProperties) {
      c.fail(p, s.minProperties === 1 ? "must not be empty"
        : `must have at least ${s.minProperties} entries`, "minProperties");
    }
  },
  maxProperties(c, s, v, p) {
    if (isObject(v) && Object.keys(v).length > s.maxProperties) {
      c.fail(p, `must have at most ${s.maxProperties} entries (it has `
        + `${Object.keys(v).length})`, "maxProperties");
    }
  },
};

/**
 * Check a parsed JobSpec against the schema at `ref` in `root` (the OpenAPI document).
 * Returns `{ errors: [{ name, path, reason, keyword }], unchecked: [{ keyword, name }] }`:
 * `unchecked` lists the schema keywords met on the way that this validator does not know.
 */
export function validate(root, value, ref = JOBSPEC_REF) {
  const checker = new Checker(root);
  checker.check({ $ref: ref }, value, []);
  return { errors: checker.errors, unchecked: [...checker.unchecked.values()] };
}
