// Parses Mermaid diagrams with Mermaid's own parser (the one GitHub renders with) and prints what it read.
// stdin: a JSON array of diagram texts; stdout: a JSON array, per diagram {ok, error} and, when ok, the
// flowchart's vertices, edges, subgraphs and classDefs as Mermaid's database holds them.
// Used by tests/review/test_markdown.py; install with `npm ci --prefix tests/mermaid` (see README).
import { JSDOM } from "jsdom";

// Mermaid sanitises labels with DOMPurify, which needs a DOM: jsdom's stands in for a browser's.
const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });

let input = "";
for await (const chunk of process.stdin) input += chunk;
const out = [];
for (const text of JSON.parse(input)) {
  try {
    const parsed = await mermaid.parse(text);
    const diagram = await mermaid.mermaidAPI.getDiagramFromText(text);
    const db = diagram.db;
    const result = { ok: true, type: parsed.diagramType };
    if (typeof db.getVertices === "function") {
      result.vertices = [...db.getVertices().values()].map((v) => ({ id: v.id, text: v.text, classes: v.classes }));
      result.edges = db.getEdges().map((e) => [e.start, e.end, e.type]);
      result.subgraphs = db.getSubGraphs().map((s) => ({ id: s.id, title: s.title, nodes: s.nodes }));
      result.classes = Object.fromEntries([...db.getClasses().entries()].map(([k, c]) => [k, c.styles]));
    }
    out.push(result);
  } catch (error) {
    out.push({ ok: false, error: String(error.message || error) });
  }
}
process.stdout.write(JSON.stringify(out));
