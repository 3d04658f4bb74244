// The five roads of the statistics window, drawn as SVG from the API's roads
// (GET /v1/tables/{id}/statistics). Every cell says what it is in text as well as colour:
// B and P and - (a tie) in the Big Road and Bead Plate, a filled or hollow mark in the
// derived roads. Each cell carries its grid position in data attributes.
const NS = "http://www.w3.org/2000/svg";
const CELL = 22;
const ROWS = 6;
const LETTER = { banker: "B", player: "P", tie: "-" };
const NAME = { banker: "Banker", player: "Player", tie: "Tie" };

function svgNode(tag, attributes = {}, text) {
  const node = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function grid(title, columns) {
  const width = Math.max(columns, 12) * CELL;
  const svg = svgNode("svg", {
    width,
    height: ROWS * CELL,
    viewBox: `0 0 ${width} ${ROWS * CELL}`,
    role: "img",
    class: "road",
  });
  svg.appendChild(svgNode("title", {}, title));
  for (let c = 0; c <= Math.max(columns, 12); c += 1) {
    svg.appendChild(svgNode("line", { x1: c * CELL, y1: 0, x2: c * CELL, y2: ROWS * CELL, class: "gridline" }));
  }
  for (let r = 0; r <= ROWS; r += 1) {
    svg.appendChild(svgNode("line", { x1: 0, y1: r * CELL, x2: width, y2: r * CELL, class: "gridline" }));
  }
  return svg;
}

// column: 0-based for drawing; row: 0-based.
function cell(svg, column, row, data, draw) {
  const g = svgNode("g", { class: "cell", transform: `translate(${column * CELL},${row * CELL})` });
  for (const [name, value] of Object.entries(data)) g.dataset[name] = String(value);
  draw(g);
  svg.appendChild(g);
}

function letter(g, text, kind, label) {
  g.appendChild(svgNode("title", {}, label));
  g.appendChild(svgNode("circle", { cx: CELL / 2, cy: CELL / 2, r: CELL / 2 - 2, class: `ring ${kind}` }));
  g.appendChild(svgNode("text", { x: CELL / 2, y: CELL / 2 + 4, "text-anchor": "middle", class: `letter ${kind}` }, text));
}

function derivedMark(g, mark) {
  // Red: a repeating pattern, drawn filled; blue: a broken one, drawn hollow.
  g.appendChild(svgNode("title", {}, mark === "red" ? "red (repeats)" : "blue (breaks)"));
  g.appendChild(svgNode("circle", {
    cx: CELL / 2, cy: CELL / 2, r: CELL / 2 - 5, class: `mark ${mark}`,
  }));
}

export function drawRoads(container, roads) {
  container.replaceChildren();
  const sections = [];
  const section = (key, title, svg) => {
    const figure = document.createElement("figure");
    figure.className = "road-figure";
    figure.dataset.road = key;
    const caption = document.createElement("figcaption");
    caption.textContent = title;
    figure.append(caption, svg);
    container.appendChild(figure);
    sections.push(figure);
  };

  const bigColumns = Math.max(0, ...roads.big_road.map((e) => e.grid_column));
  const big = grid("Big Road", bigColumns);
  for (const entry of roads.big_road) {
    cell(big, entry.grid_column - 1, entry.grid_row, {
      column: entry.grid_column, row: entry.grid_row, value: entry.winner, ties: entry.ties,
    }, (g) => {
      letter(g, LETTER[entry.winner], entry.winner,
        `${NAME[entry.winner]}, hand ${entry.hand}${entry.ties ? `, then ${entry.ties} tie(s)` : ""}`);
      if (entry.ties) {
        g.appendChild(svgNode("text", { x: CELL - 3, y: 9, "text-anchor": "end", class: "ties" }, `-${entry.ties}`));
      }
    });
  }
  section("big_road", "Big Road", big);

  const beadColumns = Math.max(0, ...roads.bead_plate.map((b) => b.column));
  const bead = grid("Bead Plate", beadColumns);
  for (const b of roads.bead_plate) {
    cell(bead, b.column - 1, b.row - 1, { column: b.column, row: b.row, value: b.outcome }, (g) => {
      letter(g, LETTER[b.outcome], b.outcome, NAME[b.outcome]);
    });
  }
  section("bead_plate", "Bead Plate", bead);

  for (const [key, title] of [["big_eye_boy", "Big Eye Boy"], ["small_road", "Small Road"], ["cockroach_pig", "Cockroach Pig"]]) {
    const road = roads[key];
    const columns = Math.max(0, ...road.entries.map((e) => e.grid_column));
    const svg = grid(title, columns);
    for (const entry of road.entries) {
      cell(svg, entry.grid_column - 1, entry.grid_row, {
        column: entry.grid_column, row: entry.grid_row, value: entry.mark,
      }, (g) => derivedMark(g, entry.mark));
    }
    section(key, title, svg);
  }
  return sections;
}
