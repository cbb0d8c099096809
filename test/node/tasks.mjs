// The npm @modelcontextprotocol/sdk client, declaring no Tasks, calls a tool that runs only as a
// task (server-everything's simulate-research-query) through a projectmcp endpoint: the gateway
// runs the task for it. It lists the tool, calls it with a progress token, calls it again
// ambiguous (the task asks for input, which its elicitation handler answers), and calls it a
// third time, cancelling the call at its first progress notification.
// Usage: node tasks.mjs ENDPOINT TOOL   (prints one JSON line; exit 0 on success)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [endpoint, tool] = process.argv.slice(2);
const deadline = setTimeout(() => { console.error("timed out"); process.exit(2); }, 60000);

const client = new Client({ name: "node-sdk-no-tasks", version: "1.0.0" }, { capabilities: { elicitation: {} } });
const asked = [];
client.setRequestHandler(ElicitRequestSchema, (req) => {
  asked.push(req.params.message);
  return { action: "accept", content: { interpretation: "snake" } };
});
const transport = new StreamableHTTPClientTransport(new URL(endpoint));
await client.connect(transport);

const listed = (await client.listTools()).tools.find((t) => t.name === tool);

const progress = [];
const plain = await client.callTool({ name: tool, arguments: { topic: "tide pools" } }, undefined,
  { onprogress: (p) => progress.push(p.message), resetTimeoutOnProgress: true });

const ambiguous = await client.callTool({ name: tool, arguments: { topic: "python", ambiguous: true } }, undefined,
  { onprogress: () => {}, resetTimeoutOnProgress: true });

const abort = new AbortController();
let cancelled = "";
try {
  await client.callTool({ name: tool, arguments: { topic: "cancelled" } }, undefined,
    { signal: abort.signal, onprogress: () => abort.abort("enough") });
  cancelled = "answered";
} catch (e) {
  cancelled = String(e);
}

console.log(JSON.stringify({
  listed: listed ?? null,
  report: plain.content?.[0]?.text ?? "",
  meta: plain._meta ?? null,
  progress,
  ambiguous: ambiguous.content?.[0]?.text ?? "",
  asked,
  cancelled,
}));
clearTimeout(deadline);
await transport.terminateSession().catch(() => {});
await client.close();
