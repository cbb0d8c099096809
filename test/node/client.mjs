// A real MCP client that no one here wrote (the npm @modelcontextprotocol/sdk) against a
// projectmcp gateway endpoint: connect over streamable HTTP, list tools, call one, make the
// upstream add a tool and wait for notifications/tools/list_changed, list again.
// Usage: node client.mjs ENDPOINT   (prints one JSON line; exit 0 on success)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const endpoint = process.argv[2];
const deadline = setTimeout(() => { console.error("timed out"); process.exit(2); }, 30000);

const client = new Client({ name: "node-sdk-client", version: "1.0.0" });
let changed;
const listChanged = new Promise((resolve) => { changed = resolve; });
client.setNotificationHandler(ToolListChangedNotificationSchema, () => changed());

const transport = new StreamableHTTPClientTransport(new URL(endpoint));
await client.connect(transport);
const before = (await client.listTools()).tools.map((t) => t.name);
const echo = await client.callTool({ name: "a__echo", arguments: { text: "from node" } });
await client.callTool({ name: "a__add_tool", arguments: { name: "from_node" } });
await listChanged;
const after = (await client.listTools()).tools.map((t) => t.name);
console.log(JSON.stringify({ protocol: transport.protocolVersion ?? null, before, echo: echo.content[0].text, after }));
clearTimeout(deadline);
await transport.terminateSession().catch(() => {});
await client.close();
