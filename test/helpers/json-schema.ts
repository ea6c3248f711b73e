/** Reading JSON Schemas in tests: a node at a path, and a schema stripped to what it accepts. */

export type Obj = Record<string, unknown>;

/** A schema node at a path of property names. */
export function schemaNode(schema: Obj, ...path: string[]): Obj {
  return path.reduce<Obj>((at, key) => {
    const next = (at.properties as Obj | undefined)?.[key];
    if (typeof next !== 'object' || next === null) throw new Error(`no schema for ${path.join('.')}`);
    return next as Obj;
  }, schema);
}

/** A schema without the given annotation keywords (e.g. `description`, `default`), for comparing what it accepts. */
export function withoutKeywords(value: unknown, keywords: readonly string[]): unknown {
  if (Array.isArray(value)) return value.map((v) => withoutKeywords(v, keywords));
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([k]) => !keywords.includes(k))
      .map(([k, v]) => [k, withoutKeywords(v, keywords)]),
  );
}
