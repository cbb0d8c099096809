// Runs the official MCP conformance suite (@modelcontextprotocol/conformance) with the
// command line given, e.g. `node conformance.mjs server --url URL --requirements 2025-11-25`.
// Its 0.2.0 releases import fs.globSync, which Node 22 added; on an older Node that one import
// is served by the glob package, whose globSync takes the same (pattern, {cwd}) the suite
// passes.
import fs from 'node:fs';
import { register } from 'node:module';

if (typeof fs.globSync !== 'function') {
  register('./conformance-hooks.mjs', import.meta.url);
}
await import('@modelcontextprotocol/conformance/dist/index.js');
