// node:fs with glob's globSync (see conformance-hooks.mjs).
export * from 'node:fs';
export { default } from 'node:fs';
export { globSync } from 'glob';
