// The reference table page: draws the table from its state, then follows the table's feed
// (EventSource on this page's own server, which follows /v1 with a key the browser never sees).
import { api, element, pounds, secondsLeft } from "./common.js";
import { drawRoads } from "./roads.js";

const root = document.getElementById("play");
const tableId = root.dataset.table;
const me = root.dataset.player;
const base = `/play/api/tables/${encodeURIComponent(tableId)}`;
const SPOTS = ["player", "banker", "tie"];
const SUITS = { C: "♣ clubs", D: "♦ diamonds", H: "♥ hearts", S: "♠ spades" };
const RANK_NAMES = { A: "A", T: "10", J: "J", Q: "Q", K: "K" };
const CARD_DELAY_MS = 350;
const COMMAND_TIMEOUT_MS = 15_000;

const view = {
  table: null,
  state: null,
  planned: 0,
  windowClosesAt: null,
  cards: { player: [], banker: [] },
  queue: [],
  dealing: false,
  pendingOutcome: null,
  roundId: null,
};

const $ = (id) => document.getElementById(id);

function say(text) {
  $("message").textContent = text;
}

function problemText(answer) {
  return answer.body?.detail ?? `The server answered ${answer.status}.`;
}

function cardValue(code) {
  const rank = code[0];
  if (rank === "A") return 1;
  if ("TJQK".includes(rank)) return 0;
  return Number(rank);
}

function cardLabel(code) {
  const rank = RANK_NAMES[code[0]] ?? code[0];
  return `${rank}${SUITS[code[1]]?.slice(0, 1) ?? code[1]}`;
}

function total(hand) {
  return view.cards[hand].reduce((sum, code) => sum + cardValue(code), 0) % 10;
}

// Balance, limit. The balance is exact: read from the wallet's own stream, or carried by the
// answer of the action that moved it. Reads may cross, so a figure at an older wallet version
// than the one shown never replaces it.
let shownWalletVersion = -1;
function showBalance(wallet) {
  if (!wallet || wallet.version < shownWalletVersion) return;
  shownWalletVersion = wallet.version;
  $("balance").textContent = pounds(wallet.available_pence);
  $("balance").dataset.pence = wallet.available_pence;
  $("balance").dataset.version = wallet.version;
}

async function refreshMe() {
  const answer = await api("GET", "/play/api/me");
  if (!answer.ok) return;
  showBalance(answer.body.wallet);
  const limit = answer.body.limit;
  $("limit").textContent = limit.limit_pence === null ? "none (the table's maximum applies)" : pounds(limit.limit_pence);
  $("limit-next").textContent = limit.next_change_at ? `(next change from ${new Date(limit.next_change_at).toUTCString()})` : "(you may change it now)";
}

// Seats, bets on the layout, phase and countdown: from the table's state.
async function refreshState() {
  const answer = await api("GET", `${base}/state`);
  if (!answer.ok) {
    say(problemText(answer));
    return;
  }
  view.state = answer.body;
  view.windowClosesAt = view.state.phase === "betting" ? view.state.window_closes_at : null;
  if (view.state.round_id !== view.roundId && view.state.cards.length === 0) {
    view.roundId = view.state.round_id;
  }
  drawSeats();
  drawBets();
  $("phase").textContent = view.state.phase;
}

function drawSeats() {
  const seats = $("seats");
  seats.replaceChildren();
  for (const seat of view.state.seats) {
    const mine = seat.player_id === me;
    const label = seat.player_id === null ? "free" : mine ? `you (${seat.player_id})` : seat.player_id;
    const button = element("button", `Seat ${seat.seat}: ${label}`, {
      type: "button",
      id: `seat-${seat.seat}`,
      class: `seat${mine ? " mine" : ""}`,
    });
    button.disabled = seat.player_id !== null;
    button.dataset.seat = seat.seat;
    if (seat.player_id !== null) {
      const stakes = seat.bets.map((b) => `${b.spot} ${pounds(b.stake_pence)}`).join(", ");
      if (stakes) button.append(element("span", ` · ${stakes}`, { class: "seat-bets" }));
      if (seat.action) button.append(element("span", ` · ${seat.action}`, { class: "seat-action" }));
    }
    button.addEventListener("click", () => sit(seat.seat));
    seats.appendChild(button);
  }
}

function drawBets() {
  let myTotal = 0;
  for (const spot of SPOTS) {
    let mine = 0;
    let others = 0;
    for (const seat of view.state.seats) {
      for (const b of seat.bets) {
        if (b.spot !== spot) continue;
        if (seat.player_id === me) mine += b.stake_pence;
        else others += b.stake_pence;
      }
    }
    myTotal += mine;
    $(`mine-${spot}`).textContent = `yours ${pounds(mine)}`;
    $(`mine-${spot}`).dataset.pence = mine;
    $(`others-${spot}`).textContent = others ? `others ${pounds(others)}` : "";
    $(`others-${spot}`).dataset.pence = others;
  }
  $("total-bet").textContent = pounds(myTotal);
  $("total-bet").dataset.pence = myTotal;
}

function drawPlanned() {
  $("planned").textContent = pounds(view.planned);
  $("planned").dataset.pence = view.planned;
}

// The roads come from the read model, which follows the log a moment behind the feed. After a
// coup (or a void) the feed names its position, its event id: read the roads again until the
// read model's checkpoint has reached it. Crossing reads never draw older roads over newer.
const ROADS_RETRY_MS = { first: 100, most: 2000 };
const roads = { wanted: 0, drawn: -1, timer: null, delay: ROADS_RETRY_MS.first };

async function refreshStatistics(position = 0) {
  roads.wanted = Math.max(roads.wanted, position);
  clearTimeout(roads.timer);
  const answer = await api("GET", `${base}/statistics`);
  if (answer.ok && answer.body.checkpoint >= roads.drawn) {
    roads.drawn = answer.body.checkpoint;
    drawStatistics(answer.body);
  }
  if (roads.drawn >= roads.wanted) {
    roads.delay = ROADS_RETRY_MS.first;
    return;
  }
  clearTimeout(roads.timer);
  roads.timer = setTimeout(() => refreshStatistics(), roads.delay);
  roads.delay = Math.min(roads.delay * 2, ROADS_RETRY_MS.most);
}

function drawStatistics(statistics) {
  const counts = statistics.roads.counts;
  $("count-banker").textContent = counts.banker;
  $("count-player").textContent = counts.player;
  $("count-ties").textContent = counts.ties;
  $("count-hands").textContent = counts.hands;
  drawRoads($("roads"), statistics.roads);
  $("roads").dataset.hands = counts.hands;
  $("roads").dataset.checkpoint = statistics.checkpoint;
}

async function refreshChat() {
  const answer = await api("GET", `${base}/chat`);
  if (!answer.ok) return;
  $("chat-log").replaceChildren();
  for (const message of answer.body.messages) addChat(message.player_id, message.text);
}

function addChat(player, text) {
  const line = element("li");
  line.append(element("strong", `${player}: `), element("span", text, { class: "chat-text" }));
  $("chat-log").appendChild(line);
}

// The coup: cards are shown one by one, in the order they were drawn, then the outcome.
function clearCoup(roundId) {
  view.cards = { player: [], banker: [] };
  view.queue = [];
  view.pendingOutcome = null;
  $("hand-player").replaceChildren();
  $("hand-banker").replaceChildren();
  $("total-player").textContent = "";
  $("total-banker").textContent = "";
  $("outcome").textContent = "";
  $("outcome").dataset.outcome = "";
  $("coup-round").textContent = roundId ? `(${roundId})` : "";
  $("coup-round").dataset.round = roundId ?? "";
}

function queueCard(payload) {
  if (payload.round_id !== $("coup-round").dataset.round) clearCoup(payload.round_id);
  view.queue.push(payload);
  if (!view.dealing) dealNext();
}

function dealNext() {
  const next = view.queue.shift();
  if (!next) {
    view.dealing = false;
    if (view.pendingOutcome) showOutcome(view.pendingOutcome);
    return;
  }
  view.dealing = true;
  view.cards[next.hand].push(next.card);
  const item = element("li", cardLabel(next.card), { class: "card", "data-card": next.card, "data-position": next.position });
  $(`hand-${next.hand}`).appendChild(item);
  $(`total-${next.hand}`).textContent = `total ${total(next.hand)}`;
  setTimeout(dealNext, CARD_DELAY_MS);
}

function showOutcome(coup) {
  view.pendingOutcome = null;
  const words = { player: "Player wins", banker: "Banker wins", tie: "Tie" };
  $("outcome").textContent = `${words[coup.outcome]}: Player ${coup.player_total}, Banker ${coup.banker_total}`;
  $("outcome").dataset.outcome = coup.outcome;
  $("outcome").dataset.round = coup.round_id;
}

// Actions. A player's commands go one at a time, in the order given: sent together, a Deal
// could reach the server (another worker) before the bet clicked just before it, and be
// refused for want of a bet.
let lastCommand = Promise.resolve();
function act(method, path, body, success) {
  const run = lastCommand.then(() => send(method, path, body, success));
  lastCommand = run.catch(() => undefined);
  return run;
}

async function send(method, path, body, success) {
  let answer;
  try {
    answer = await api(method, path, body, COMMAND_TIMEOUT_MS);
  } catch {
    // No answer (the network, or the time limit): the player is told, and the next command
    // in the queue goes ahead. Sent again, a command is refused or repeated by its rules.
    say("The server did not answer; try again.");
    return { ok: false, status: 0, body: null };
  }
  if (!answer.ok) {
    say(problemText(answer));
    return answer;
  }
  // A command that moved our money answers with the wallet just after it.
  showBalance(answer.body?.balance_after);
  if (success) say(success);
  return answer;
}

async function sit(seat) {
  await act("POST", `${base}/seats`, { seat }, `You sit at seat ${seat}.`);
  await refreshState();
}

// The round the player sees open for betting, named in each action meant for it: one that
// arrives after that window closed is refused as late, never moved into the next round. At an
// idle table none is named, and a bet opens the next round.
function shownRound() {
  return view.state?.phase === "betting" && view.state.round_id ? { round_id: view.state.round_id } : {};
}

async function placeBet(spot) {
  if (view.planned <= 0) {
    say("Choose chips first: each click on a chip adds it to your planned wager.");
    return;
  }
  const body = { spot, stake_pence: view.planned, ...shownRound() };
  await act("POST", `${base}/bets`, body, `${pounds(view.planned)} on ${spot}.`);
}

const removeBets = () => act("DELETE", `${base}/bets`, undefined, "Your bets are withdrawn.");
const deal = () => act("POST", `${base}/deal`, shownRound(), "Deal.");
const pass = () => act("POST", `${base}/pass`, shownRound(), "You pass this hand.");
const rebet = () => act("POST", `${base}/rebet`, shownRound(), "Your last bet again.");

function adjustPlanned(pence) {
  view.planned = Math.max(0, view.planned + pence);
  drawPlanned();
}

// The rules' numeric keyboard shortcuts.
function onKey(event) {
  const target = event.target;
  if (target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement) return;
  // A focused button takes Enter itself.
  if (event.key === "Enter" && target instanceof HTMLButtonElement) return;
  const step = event.shiftKey ? 1000 : 100;
  const actions = {
    0: rebet,
    Enter: deal,
    Delete: removeBets,
    ".": removeBets,
    1: () => placeBet("player"),
    2: () => placeBet("banker"),
    3: () => placeBet("tie"),
    ArrowUp: () => adjustPlanned(step),
    ArrowDown: () => adjustPlanned(-step),
  };
  const action = actions[event.key];
  if (!action) return;
  event.preventDefault();
  action();
}

// The feed.
function follow() {
  const feed = new EventSource(`${base}/feed`);
  const on = (type, handler) => feed.addEventListener(type, (e) => handler(JSON.parse(e.data)));
  feed.onopen = () => {
    // After a reconnect the feed resumes by Last-Event-ID; a re-read covers the gap's state.
    refreshState();
    refreshMe();
  };
  on("RoundOpened", (event) => {
    view.windowClosesAt = event.window_closes_at;
    refreshState();
  });
  for (const type of ["PlayerSat", "PlayerChangedSeat"]) {
    on(type, (event) => {
      refreshState();
      if (event.payload.player_id === me) refreshMe();
    });
  }
  for (const type of ["PlayerLeft", "PlayerRemoved", "DealPressed", "PlayerPassed", "PlayerExcluded", "TableSuspended", "TableReopened"]) {
    on(type, () => refreshState());
  }
  for (const type of ["BetPlaced", "StakeReturned"]) {
    on(type, (event) => {
      refreshState();
      if (event.payload.player_id === me) refreshMe();
    });
  }
  on("CardDrawn", (event) => queueCard(event.payload));
  on("CoupCompleted", (event) => {
    view.pendingOutcome = event.payload;
    if (!view.dealing) showOutcome(event.payload);
  });
  on("BetSettled", (event) => {
    if (event.payload.player_id === me) {
      say(`Settled: ${event.payload.spot} ${pounds(event.payload.stake)} paid ${pounds(event.payload.payout)}.`);
    }
  });
  on("RoundSettled", (event) => {
    // The feed only shows an event once its append is committed, so an exact read now has
    // whatever this coup paid us, even when another player's Deal brought it.
    refreshMe();
    refreshState();
    refreshStatistics(event.position);
  });
  on("RoundVoided", (event) => {
    $("outcome").textContent = `Round ${event.payload.round_id} is void: malfunction voids all pays and play. Stakes are returned.`;
    $("outcome").dataset.outcome = "void";
    $("outcome").dataset.round = event.payload.round_id;
    refreshMe();
    refreshState();
    refreshStatistics(event.position);
  });
  on("MessagePosted", (event) => addChat(event.payload.player_id, event.payload.text));
  on("PlayerMuted", (event) => {
    if (event.payload.player_id === me) $("chat-error").textContent = "You have been muted in this table's chat.";
  });
  feed.onerror = () => say("Reconnecting to the table…");
}

function tick() {
  const left = secondsLeft(view.windowClosesAt);
  $("countdown").textContent = left === null ? "" : `${left} s left to bet`;
  $("countdown").dataset.seconds = left ?? "";
}

function wire() {
  for (const chip of document.querySelectorAll("[data-chip]")) {
    chip.addEventListener("click", () => adjustPlanned(Number(chip.dataset.chip)));
  }
  $("clear-plan").addEventListener("click", () => { view.planned = 0; drawPlanned(); });
  for (const spot of SPOTS) {
    const button = $(`spot-${spot}`);
    button.addEventListener("click", () => placeBet(spot));
    button.addEventListener("contextmenu", (event) => {
      event.preventDefault();
      removeBets();
    });
  }
  $("deal").addEventListener("click", deal);
  $("pass").addEventListener("click", pass);
  $("rebet").addEventListener("click", rebet);
  $("remove-bets").addEventListener("click", removeBets);
  $("chat-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("chat-error").textContent = "";
    const text = $("chat-text").value;
    if (!text) return;
    const answer = await api("POST", `${base}/chat`, { text });
    if (answer.ok) $("chat-text").value = "";
    else $("chat-error").textContent = problemText(answer);
  });
  $("limit-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("limit-error").textContent = "";
    const raw = $("limit-pounds").value.trim();
    const body = { limit_pence: raw === "" ? null : Number(raw) * 100 };
    const answer = await api("PUT", "/play/api/limit", body);
    if (answer.ok) {
      await refreshMe();
      return;
    }
    let text = problemText(answer);
    if (answer.body?.next_change_at) {
      text += ` You may change your table bet limit no more than once a week; the next change is possible from ${new Date(answer.body.next_change_at).toUTCString()}.`;
    }
    $("limit-error").textContent = text;
  });
  document.addEventListener("keydown", onKey);
  setInterval(tick, 250);
}

async function start() {
  wire();
  drawPlanned();
  clearCoup(null);
  await Promise.all([refreshState(), refreshMe(), refreshStatistics(), refreshChat()]);
  follow();
  root.dataset.ready = "true";
}

start();
