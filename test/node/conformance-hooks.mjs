// Module hooks for conformance.mjs on a Node without fs.globSync: the suite's "fs" is a module
// that is node:fs plus glob's globSync.
const withGlob = new URL('./conformance-fs.mjs', import.meta.url).href;

export async function resolve(specifier, context, next) {
  const fromSuite = context.parentURL?.includes('/@modelcontextprotocol/conformance/');
  if (fromSuite && (specifier === 'fs' || specifier === 'node:fs')) {
    return { url: withGlob, shortCircuit: true };
  }
  return next(specifier, context);
}
