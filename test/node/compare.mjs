// Side by side: one npm @modelcontextprotocol/sdk client (declaring sampling, elicitation and
// roots) talks once to an MCP server directly over stdio and once to the same server through a
// projectmcp endpoint, and records, operation by operation, what each answered.
// Usage: node compare.mjs ENDPOINT PREFIX COMMAND [ARGS...]
//   PREFIX is the projected name prefix of the server's tools and prompts ("everything__").
// Prints one JSON object: {operation: {direct, endpoint, same}}; exit 0 when it ran.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema, LoggingMessageNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const [endpoint, prefix, command, ...args] = process.argv.slice(2);
const deadline = setTimeout(() => { console.error("timed out"); process.exit(2); }, 240000);

function agent() {
  const client = new Client({ name: "compare", version: "1.0.0" },
    { capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } });
  client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
    const first = req.params.messages[0]?.content;
    return { role: "assistant", model: "test-model", content: { type: "text", text: "sampled: " + (first?.text ?? "") } };
  });
  // Accepted with no content: the server decides what that means (its schema asks for a
  // name), not the gateway's own client.
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: "accept", content: {} }));
  client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [{ uri: "file:///work/agent", name: "agent" }] }));
  client.logs = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => client.logs.push(n.params.level));
  return client;
}

const direct = agent();
await direct.connect(new StdioClientTransport({ command, args, stderr: "ignore" }));
const gateway = agent();
const transport = new StreamableHTTPClientTransport(new URL(endpoint));
await gateway.connect(transport);

// What a session sees, without the parts the endpoint documents as its own: projected names
// (prefix), the serverInfo stamped in _meta, and values that change on every call.
const unname = (v) => JSON.parse(JSON.stringify(v ?? null).replaceAll(`"${prefix}`, `"`));
// Also equal: the same object with keys in another order, list items in another order (MCP
// lists are sets), false or 0 left out, and the endpoint's own cache hints (ttlMs,
// cacheScope).
const canonical = (v) => {
  if (Array.isArray(v)) {
    const items = v.map(canonical);
    return items.every((x) => x && typeof x === "object" && (x.name || x.uri))
      ? items.sort((a, b) => String(a.name ?? a.uri).localeCompare(String(b.name ?? b.uri))) : items;
  }
  if (v && typeof v === "object") {
    const out = {};
    for (const k of Object.keys(v).sort()) {
      if (k === "_meta" || k === "ttlMs" || k === "cacheScope") continue; // the endpoint's own
      if (v[k] === false || v[k] === 0) continue; // a default left out (the Go types omit them)
      out[k] = canonical(v[k]);
    }
    return out;
  }
  return v;
};
const normalize = (v) => canonical(unname(v));
const outcome = async (f) => {
  try { return { ok: true, value: normalize(await f()) }; } catch (e) { return { ok: false, error: String(e.message ?? e) }; }
};
const table = {};
// firstDifference names the first place two JSON values differ, for the report.
function firstDifference(a, b, path = "") {
  if (JSON.stringify(a) === JSON.stringify(b)) return null;
  if (a && b && typeof a === "object" && typeof b === "object") {
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
      const d = firstDifference(a[k], b[k], `${path}/${k}`);
      if (d) return d;
    }
  }
  return `${path}: ${JSON.stringify(a)?.slice(0, 200)} vs ${JSON.stringify(b)?.slice(0, 200)}`;
}
async function compare(op, onDirect, onGateway, { sameContent = true } = {}) {
  const d = await outcome(onDirect);
  const g = await outcome(onGateway);
  const same = d.ok === g.ok && (!sameContent || !d.ok || JSON.stringify(d.value) === JSON.stringify(g.value));
  table[op] = { direct: d.ok ? "ok" : "error: " + d.error, endpoint: g.ok ? "ok" : "error: " + g.error, same };
  if (!same && d.ok && g.ok) table[op].diff = firstDifference(d.value, g.value);
  return d.ok ? d.value : undefined;
}
const both = (f) => [() => f(direct, ""), () => f(gateway, prefix)];

await compare("ping", ...both((c) => c.ping()));
// The gateway does not carry Tasks: a tool's execution.taskSupport other than "forbidden" (the
// default) is not advertised through it, so the direct list is compared without it.
const withoutTasks = (res) => ({
  ...res,
  tools: res.tools.map(({ execution, ...tool }) => {
    if (!execution || execution.taskSupport === undefined || execution.taskSupport === "forbidden") {
      return execution ? { ...tool, execution } : tool;
    }
    const { taskSupport, ...rest } = execution;
    return Object.keys(rest).length ? { ...tool, execution: rest } : tool;
  }),
});
const tools = await compare("tools/list", () => direct.listTools().then(withoutTasks), () => gateway.listTools());
const prompts = await compare("prompts/list", ...both((c) => c.listPrompts()));
const resources = await compare("resources/list", ...both((c) => c.listResources()));
await compare("resources/templates/list", ...both((c) => c.listResourceTemplates()));
await compare("logging/setLevel", ...both((c) => c.setLoggingLevel("debug")));

// Arguments a schema accepts: required strings "hello", numbers 1, booleans false.
const argsFor = (schema) => Object.fromEntries((schema?.required ?? []).map((name) => {
  const type = schema.properties?.[name]?.type;
  return [name, type === "number" || type === "integer" ? 1 : type === "boolean" ? false : "hello"];
}));
for (const p of (prompts?.prompts ?? []).slice(0, 4)) {
  const a = Object.fromEntries((p.arguments ?? []).filter((x) => x.required).map((x) => [x.name, "hello"]));
  await compare(`prompts/get ${p.name}`, ...both((c, pre) => c.getPrompt({ name: pre + p.name, arguments: a })));
  const first = (p.arguments ?? [])[0];
  if (first) {
    await compare(`completion/complete ${p.name}`, ...both((c, pre) => c.complete({
      ref: { type: "ref/prompt", name: pre + p.name }, argument: { name: first.name, value: "" } })));
  }
}
for (const r of (resources?.resources ?? []).slice(0, 3)) {
  await compare(`resources/read ${r.uri}`, ...both((c) => c.readResource({ uri: r.uri })));
}
const wanted = /^(echo|add|get-sum|sampleLLM|trigger-sampling-request|elicitation|startElicitation|trigger-elicitation-request|listRoots|get-roots-list|structuredContent|get-structured-content|getTinyImage|get-tiny-image)$/;
for (const t of (tools?.tools ?? []).filter((t) => wanted.test(t.name))) {
  await compare(`tools/call ${t.name}`, ...both((c, pre) => c.callTool({ name: pre + t.name, arguments: argsFor(t.inputSchema) })));
}
table["notifications/message (after setLevel debug)"] = {
  direct: direct.logs.length > 0 ? "ok" : "none", endpoint: gateway.logs.length > 0 ? "ok" : "none",
  same: (direct.logs.length > 0) === (gateway.logs.length > 0), sameContent: false,
};

console.log(JSON.stringify(table));
clearTimeout(deadline);
await transport.terminateSession().catch(() => {});
await gateway.close();
await direct.close();
