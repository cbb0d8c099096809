// The npm @modelcontextprotocol/sdk client starts a task itself (SEP-1686) through a projectmcp
// endpoint: a task-augmented tools/call, tasks/get until the task ends, tasks/result. A second
// session then names the first one's task, and the first cancels a task of its own. A session
// that declares Tasks is told the endpoint takes them; one that does not, not.
// Usage: node tasks-carried.mjs ENDPOINT TOOL   (prints one JSON line; exit 0 on success)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, CancelTaskResultSchema, CreateTaskResultSchema, GetTaskResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [endpoint, tool] = process.argv.slice(2);
const deadline = setTimeout(() => { console.error("timed out"); process.exit(2); }, 60000);

// connect opens a session; one that declares Tasks holds the server to its capabilities
// (enforceStrictCapabilities), so it starts a task only where the initialize result allows one.
async function connect(name, tasks = true) {
  const capabilities = tasks ? { tasks: { requests: { tools: { call: {} } } } } : {};
  const client = new Client({ name, version: "1.0.0" }, { capabilities, enforceStrictCapabilities: tasks });
  const transport = new StreamableHTTPClientTransport(new URL(endpoint));
  await client.connect(transport);
  return { client, transport };
}
const errorOf = (e) => ({ code: e.code ?? null, message: String(e.message ?? e) });

const a = await connect("tasks-a");
const created = await a.client.request({ method: "tools/call", params: { name: tool, arguments: { topic: "kelp" }, task: { ttl: 60000 } } }, CreateTaskResultSchema);
const taskId = created.task.taskId;
const statuses = [];
for (;;) {
  const t = await a.client.request({ method: "tasks/get", params: { taskId } }, GetTaskResultSchema);
  statuses.push({ taskId: t.taskId, status: t.status, message: t.statusMessage ?? "" });
  if (["completed", "failed", "cancelled"].includes(t.status)) break;
  await new Promise((r) => setTimeout(r, t.pollInterval ?? 500));
}
const result = await a.client.request({ method: "tasks/result", params: { taskId } }, CallToolResultSchema);

const b = await connect("tasks-b");
const plain = await connect("no-tasks", false);
let foreign = null;
try {
  await b.client.request({ method: "tasks/get", params: { taskId } }, GetTaskResultSchema);
} catch (e) {
  foreign = errorOf(e);
}
let altered = null;
try {
  await a.client.request({ method: "tasks/get", params: { taskId: taskId.slice(0, -2) + "xx" } }, GetTaskResultSchema);
} catch (e) {
  altered = errorOf(e);
}

const second = await a.client.request({ method: "tools/call", params: { name: tool, arguments: { topic: "cancel me" }, task: {} } }, CreateTaskResultSchema);
const cancelled = await a.client.request({ method: "tasks/cancel", params: { taskId: second.task.taskId } }, CancelTaskResultSchema);

console.log(JSON.stringify({
  announced: a.client.getServerCapabilities()?.tasks ?? null,
  announcedWithout: plain.client.getServerCapabilities()?.tasks ?? null,
  taskId,
  statuses,
  report: result.content?.[0]?.text ?? "",
  related: result._meta?.["io.modelcontextprotocol/related-task"] ?? null,
  foreign,
  altered,
  cancelled: { same: cancelled.taskId === second.task.taskId, status: cancelled.status },
}));
clearTimeout(deadline);
for (const s of [a, b, plain]) {
  await s.transport.terminateSession().catch(() => {});
  await s.client.close();
}
