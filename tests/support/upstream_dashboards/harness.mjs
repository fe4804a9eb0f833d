// Runs one TARSy dashboard's own WebSocket service (bundled unmodified from its
// TypeScript by esbuild, see tests/support/dashboard_clients.py) in Node, as the
// dashboard's pages use it, and reports what its handlers get.
//
//   node --experimental-websocket harness.mjs BUNDLE SERVER_URL USER
//
// Commands, one JSON object a line on stdin:
//   {"op": "subscribe", "channel": "..."}  subscribeToChannel with a handler that reports
//   {"op": "on_event", "type": "..."}      onEvent (the service's global handlers by type)
//   {"op": "connect"}                      connect, as a page does after subscribing
//   {"op": "offline"} / {"op": "online"}   the network goes away (open sockets drop and
//                                          new ones are refused) and comes back
// Reports, one JSON object a line on stdout:
//   {"handler": "session:<id>" | "type:<type>", "event": {...}}
//   {"delivered": {...}}  after the service handled a message of the server (so after
//                         the reports of every handler it called with it)
//   {"connected": true | false}
import { pathToFileURL } from "node:url";
import readline from "node:readline";

const [bundle, serverUrl, user] = process.argv.slice(2);
const report = (message) => process.stdout.write(JSON.stringify(message) + "\n");
// stdout carries the reports alone: the services' own log lines go to stderr.
console.log = console.error;

// What Vite gives a production build (import.meta.env, which esbuild maps to this name):
// the service connects to the server named here.
globalThis.__VITE_ENV__ = {
  DEV: false,
  PROD: true,
  MODE: "production",
  VITE_API_BASE_URL: serverUrl,
  VITE_WS_BASE_URL: serverUrl.replace(/^http/, "ws"),
};

// TARSy's oauth2-proxy: every handshake carries the signed-in user's name. And the
// network, which the test can take away: a socket opened while offline is refused.
const REFUSING_URL = "ws://127.0.0.1:1/";
let online = true;
const openSockets = new Set();

class ProxiedWebSocket extends WebSocket {
  constructor(url) {
    super(online ? url : REFUSING_URL, { headers: { "X-Forwarded-User": user } });
    openSockets.add(this);
    // Added before the service sets its onmessage, so this runs first: setImmediate
    // reports once the service's handlers are done with the message.
    this.addEventListener("message", ({ data }) => setImmediate(() => report({ delivered: JSON.parse(data) })));
    this.addEventListener("close", () => openSockets.delete(this));
  }
}
globalThis.WebSocket = ProxiedWebSocket;

const { websocketService } = await import(pathToFileURL(bundle).href);
websocketService.onConnectionChange((connected) => report({ connected }));

const commands = {
  subscribe: ({ channel }) => websocketService.subscribeToChannel(channel, (event) => report({ handler: channel, event })),
  on_event: ({ type }) => websocketService.onEvent(type, (event) => report({ handler: `type:${type}`, event })),
  connect: () => websocketService.connect(),
  offline: () => {
    online = false;
    for (const socket of openSockets) socket.close();
  },
  online: () => {
    online = true;
  },
};

for await (const line of readline.createInterface({ input: process.stdin })) {
  const command = JSON.parse(line);
  commands[command.op](command);
}
process.exit(0);
