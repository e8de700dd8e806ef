#!/usr/bin/env python3
"""Writes bench/prompts.jsonl and bench/heldout.jsonl, the repository's own
prompt sets for `specula bench`, `specula tune-self` and scripts/loadtest.sh.

One request per line: {"id", "category", "messages", "max_tokens"}.

prompts.jsonl  24 prompts, 4 per category: code_edit, summarize, rag_qa,
               transform (input-grounded: the answer copies from or uses a
               text, code or document given in the prompt), chat and math
               (the general case).
heldout.jsonl  12 more: chat 4, math 4, and one each of code_edit,
               summarize, rag_qa and transform.  Held out: never used to
               train or tune a drafter, only to measure one.

Every name, place, product and figure below is made up.  The target models
are small (SmolLM2-135M-Instruct, Gemma 3 270M), so the tasks are short and
plainly worded.

Run: python3 bench/make_prompts.py   (rewrites both files next to this script)
"""
import json
import os


def req(id_, category, content, max_tokens):
    return {"id": id_, "category": category,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens}


# ---------------------------------------------------------------------------
# code_edit
# ---------------------------------------------------------------------------

CODE_PY_STOCK = '''def add_item(stock, name, count):
    if name in stock:
        stock[name] = stock[name] + count
    else:
        stock[name] = count
    return stock


def remove_item(stock, name, count):
    if name not in stock:
        return False
    if stock[name] < count:
        return False
    stock[name] = stock[name] - count
    if stock[name] == 0:
        del stock[name]
    return True


def low_items(stock, limit):
    result = []
    for name in sorted(stock):
        if stock[name] < limit:
            result.append(name)
    return result


def has_item(stock, name):
    return name in stock and stock[name] > 0


def total_count(stock):
    total = 0
    for name in stock:
        total = total + stock[name]
    return total'''

CODE_C_LINES = '''/* Small helpers for reading text files line by line. */
#include <stdio.h>
#include <string.h>

int count_long_lines(const char *path, size_t min_len)
{
    char buf[64];
    int count = 0;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(buf, 64, f) != NULL) {
        size_t n = strlen(buf);
        if (n > 0 && buf[n - 1] == '\\n')
            buf[n - 1] = '\\0';
        if (strlen(buf) >= min_len)
            count++;
    }
    fclose(f);
    return count;
}

int print_first_line(const char *path)
{
    char buf[64];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    if (fgets(buf, 64, f) != NULL)
        printf("%s", buf);
    fclose(f);
    return 0;
}'''

CODE_JS_TIMER = '''var laps = [];
var startedAt = null;

function start() {
  var now = Date.now();
  startedAt = now;
  laps = [];
}

function lap() {
  var now = Date.now();
  var elapsed = now - startedAt;
  laps.push(elapsed);
  return elapsed;
}

function fastestLap() {
  var best = null;
  for (var i = 1; i < laps.length; i++) {
    var time = laps[i] - laps[i - 1];
    if (best === null || time < best) {
      best = time;
    }
  }
  return best;
}

function lapCount() {
  var count = laps.length;
  return count;
}

function reset() {
  var old = laps.length;
  laps = [];
  startedAt = null;
  return old;
}'''

CODE_SH_BACKUP = '''#!/bin/sh
# Copies the notes folder to the backup disk and keeps the last seven copies.
SRC=$HOME/notes
DEST=/mnt/backup/notes
STAMP=$(date +%Y-%m-%d)

echo "Backing up $SRC"
mkdir -p $DEST/$STAMP
cp -r $SRC/* $DEST/$STAMP/
echo "Copied files to $DEST/$STAMP"

COUNT=$(ls $DEST | wc -l)
if [ $COUNT -gt 7 ]; then
    OLDEST=$(ls $DEST | head -n 1)
    echo "Removing old backup $OLDEST"
    rm -r $DEST/$OLDEST
fi

LOG=$DEST/backup.log
echo "$STAMP copied from $SRC" >> $LOG
SIZE=$(du -sh $DEST/$STAMP | cut -f1)
echo "Backup size: $SIZE"
if [ -z $SIZE ]; then
    echo "Could not measure $DEST/$STAMP"
fi
echo "Done"'''

CODE_PY_SCORES = '''def read_scores(path):
    scores = {}
    with open(path) as f:
        for line in f:
            player, points = line.strip().split(";")
            scores[player] = scores.get(player, 0) + int(points)
    return scores


def top_players(scores, n):
    ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    return [player for player, _ in ranked[:n]]


def print_table(scores):
    for player in sorted(scores):
        print(player, scores[player])


def average_score(scores):
    if not scores:
        return 0
    return sum(scores.values()) / len(scores)


def remove_player(scores, player):
    if player in scores:
        del scores[player]
        return True
    return False


def players_above(scores, limit):
    return [player for player in sorted(scores) if scores[player] > limit]'''

# ---------------------------------------------------------------------------
# summarize
# ---------------------------------------------------------------------------

SUM_SEEDS = """The public library in Millbrook started a seed-lending shelf last spring. \
Members can take up to five packets of vegetable or flower seeds for free, \
grow the plants at home, and at the end of the season bring back seeds saved \
from their best plants. In the first year, 212 people borrowed seeds and about \
a third of them returned seeds in the autumn. The most popular packets were \
cherry tomatoes, sunflowers and climbing beans, while carrots and onions were \
taken least often. Volunteers from the local gardening club sort the returned \
seeds, label them with the grower's name and the year, and throw away any \
that look damp or mouldy. The library also ran four free workshops on saving \
seeds, which were fully booked. Next year the shelf will move next to the \
front desk, and the library plans to add seeds of herbs such as basil and dill."""

SUM_OUTAGE = """Incident report, payment service, Tuesday.
At 14:05 the payment service began returning errors for about 30 percent of \
card payments. The on-call engineer, Priya, was paged at 14:08 and found that \
one of the three database replicas had run out of disk space after a logging \
setting was changed the day before. Requests routed to that replica failed, \
while requests to the other two worked. At 14:21 Priya removed the full \
replica from the pool, and the error rate dropped to zero within two minutes. \
She then deleted old log files, restored the previous logging setting and \
added the replica back at 15:10. No payments were charged twice; failed \
payments were shown to customers as errors, and most customers retried \
successfully. Follow-up tasks: add an alert when any replica's disk is more \
than 80 percent full, require a second reviewer for logging changes, and \
write a short guide on removing a replica from the pool."""

SUM_FAIR = """Notes from the science fair planning meeting, Greenfield Primary School.
Present: Mr. Okafor, Ms. Lindqvist, Mrs. Duarte, two parent volunteers.
The fair will be held on Friday 14 March in the school hall, from 1 pm to 4 pm. \
Each class from year three to year six will present at least four projects. \
Mr. Okafor said last year's judging took too long, so this year there will be \
three judges instead of two, and each judge will see one third of the tables. \
Ms. Lindqvist will ask the local water company whether one of their engineers \
can be a judge. The parents suggested a small snack stall to raise money for \
new microscopes; everyone agreed, as long as no food contains nuts. \
Mrs. Duarte will print certificates for every student who presents. \
Tables must be set up by 12:30 on the day. The next meeting is on 20 February."""

SUM_REVIEWS = """Customer reviews of the Brightline K2 desk lamp (summary of 40 reviews):
Many buyers like the warm and cool light settings and say the lamp is bright \
enough for reading and drawing. Several reviewers mention that the arm is easy \
to bend and stays in place. The touch controls are praised for being simple. \
On the other hand, a number of people say the base is light and the lamp tips \
over when the arm is stretched out fully. Some find the power cable too short, \
at about one metre. Three reviewers report that the lamp makes a faint buzzing \
sound at the lowest brightness. A few people wish it had a USB port for charging \
a phone. Most reviewers still rate it four stars out of five and say it is good \
value for its price of 29 euros."""

SUM_COUNCIL = """The Ashford town council met on Monday to discuss the old bus depot on \
Mill Road, which has been empty for six years. Three plans were presented. \
The first would turn the building into a covered market with thirty stalls. \
The second would knock it down and build forty small flats. The third would \
keep the building and turn it into a sports hall for schools and clubs. \
Residents at the meeting spoke mostly in favour of the market, saying the town \
centre needs more reasons for people to visit. Two councillors warned that a \
market would need a manager and might lose money in its first years. In the \
end the council voted seven to four to study the market plan in more detail, \
with a report due in June. The flats plan was rejected because the site is \
next to a flood zone. The sports hall plan may be considered again next year."""

# ---------------------------------------------------------------------------
# rag_qa
# ---------------------------------------------------------------------------

RAG_BIKES = """Document 1: Pedalo city bikes can be rented from any of the 48 stations \
in Norvik. A single ride costs 2 euros for the first 30 minutes and 1 euro for \
every further 15 minutes. A day pass costs 9 euros and includes unlimited \
rides of up to 45 minutes each.

Document 2: Bikes must be returned to a station and locked into a free dock. \
If a bike is not returned within 24 hours, a fee of 150 euros is charged. If \
the station you reach is full, the app shows the nearest station with free \
docks and gives you 15 extra minutes at no cost.

Document 3: Electric Pedalo bikes cost 1 euro more per ride than normal bikes. \
They are not included in the day pass. Riders must be at least 16 years old \
to use an electric bike.

Question: I have a day pass. How much will a 40-minute ride on an electric \
bike cost me? Answer in one or two sentences and say which documents you used."""

RAG_MUSEUM = """Visitor information, Harbour Museum of Ships and Maps.

Opening hours: Tuesday to Friday 10:00 to 17:00; Saturday and Sunday 9:00 to \
18:00; closed on Mondays except on public holidays. The last entry is 45 minutes \
before closing time.

Tickets: adults 12 euros, students and people over 65 8 euros, children under \
12 free. A family ticket for two adults and up to three children costs 25 euros.

Rules: photography without flash is allowed in all rooms except the map room, \
where old paper maps are damaged by light. Large bags must be left in the free \
lockers on the ground floor. Food and drink are only allowed in the cafe.

Guided tours: free tours in English start at 11:00 and 15:00 every day the \
museum is open and last one hour.

Question: I want to visit on a Saturday with my partner and our two children, \
aged 8 and 14, and join the afternoon tour. What time is the last entry, what \
will our tickets cost, and can I take photos of the map room?"""

RAG_TRAINS = """Timetable, Ridgeway line, weekdays.

train | leaves Alden | arrives Brookfield | arrives Carden | notes
R101 | 07:15 | 08:02 | 08:40 | stops at every station
R103 | 08:30 | 09:05 | 09:31 | fast train, does not stop at Dunmore
R105 | 09:45 | 10:32 | 11:10 | stops at every station
R107 | 11:20 | 11:55 | 12:21 | fast train, does not stop at Dunmore
R109 | 13:00 | 13:47 | 14:25 | stops at every station, bicycles allowed
R111 | 15:30 | 16:05 | 16:31 | fast train, does not stop at Dunmore

Dunmore lies between Brookfield and Carden. Bicycles are only allowed on \
trains marked "bicycles allowed". A ticket from Alden to Carden costs 14 euros; \
a ticket from Alden to Brookfield costs 9 euros.

Question: I live in Alden and need to be in Carden before 11:30. Which trains \
can I take, and which one leaves latest? Answer using the timetable."""

RAG_TOOL = """Tallyhook user guide, section 4: configuration.

4.1 Tallyhook reads its settings from the file tallyhook.toml in your home \
folder. If the file does not exist, Tallyhook creates it with default values \
the first time it starts.

4.2 To reset all settings to their defaults, close Tallyhook, delete \
tallyhook.toml and start Tallyhook again. Your saved projects are not touched, \
because they live in the folder tallyhook-projects.

4.3 The setting autosave_minutes controls how often open projects are saved. \
The default is 5. Setting it to 0 turns autosave off.

4.4 The setting theme can be "light", "dark" or "system". With "system", \
Tallyhook follows the colour scheme of your computer.

4.5 Settings changed in the Preferences window are written to tallyhook.toml \
when you press Save. Editing the file by hand while Tallyhook is open has no \
effect until the next start.

Question: My Tallyhook settings are broken. How do I reset them, and will I \
lose my projects? Also, how do I turn off autosave? Answer briefly and give \
the section numbers you used."""

RAG_GYM = """Document A: Members of Northside Fitness can use the gym from 6:00 to \
22:00 on weekdays and from 8:00 to 20:00 at weekends. The swimming pool opens \
one hour later and closes one hour earlier than the gym every day.

Document B: There are two memberships. Basic costs 25 euros a month and covers \
the gym only. Plus costs 38 euros a month and covers the gym, the pool and all \
group classes. Members can switch from Basic to Plus at any time; the new price \
starts on the first day of the next month.

Document C: Group classes must be booked in the app at least two hours before \
they start. Members who miss three booked classes in one month cannot book \
classes for the following two weeks.

Question: I have a Basic membership and want to swim on Saturday mornings. \
What membership do I need, what will it cost, and what is the earliest time I \
can swim on a Saturday? Say which documents you used."""

# ---------------------------------------------------------------------------
# transform
# ---------------------------------------------------------------------------

TR_JSON_ROWS = """[
  {"city": "Alden", "country": "Norland", "population": 48200, "founded": 1412},
  {"city": "Brookfield", "country": "Norland", "population": 12950, "founded": 1588},
  {"city": "Carden", "country": "Westmark", "population": 103400, "founded": 1201},
  {"city": "Dunmore", "country": "Westmark", "population": 7310, "founded": 1744},
  {"city": "Eastwick", "country": "Norland", "population": 22640, "founded": 1630},
  {"city": "Fairhaven", "country": "Southmere", "population": 65080, "founded": 1355},
  {"city": "Glenrock", "country": "Southmere", "population": 3905, "founded": 1812},
  {"city": "Hollowell", "country": "Westmark", "population": 18770, "founded": 1499},
  {"city": "Ironbridge", "country": "Norland", "population": 31020, "founded": 1563},
  {"city": "Juniper Falls", "country": "Southmere", "population": 9480, "founded": 1790},
  {"city": "Kestrel Point", "country": "Westmark", "population": 5150, "founded": 1826},
  {"city": "Lowmoor", "country": "Norland", "population": 14330, "founded": 1677}
]"""

TR_INGREDIENTS = """Vegetable soup for six people:
- 2 tablespoons olive oil
- 1 large onion, chopped
- 3 carrots, sliced
- 2 sticks celery, sliced
- 2 cloves garlic, crushed
- 400 grams chopped tomatoes
- 1.5 litres vegetable stock
- 200 grams green beans
- 150 grams small pasta
- 1 teaspoon dried thyme
- 1 pinch salt
- 2 handfuls fresh spinach
- 1 tin white beans, drained
- 2 potatoes, diced
- 1 bay leaf
- half a teaspoon black pepper
- 1 tablespoon lemon juice
- 1 small bunch parsley, chopped
- 4 tablespoons grated cheese, to serve"""

TR_YAML = """server:
  host: 0.0.0.0
  port: 8080
  workers: 4
  timeout_seconds: 30
database:
  driver: postgres
  host: db.internal
  port: 5432
  name: orders
  pool_size: 10
logging:
  level: info
  file: /var/log/orders/app.log
  rotate_days: 14
features:
  new_checkout: true
  gift_cards: false
  max_cart_items: 50
email:
  smtp_host: mail.internal
  smtp_port: 587
  sender: orders@example.com
  retry_count: 3
cache:
  enabled: true
  backend: redis
  host: cache.internal
  port: 6379
  ttl_seconds: 600
payments:
  provider: examplepay
  currency: EUR
  capture_delay_minutes: 10
  allow_refunds: true
metrics:
  enabled: true
  path: /metrics
  port: 9100
  interval_seconds: 15"""

TR_LOGS = """2026-03-02 08:14:03 INFO server started on port 8080
2026-03-02 08:14:05 INFO connected to database orders
2026-03-02 08:20:41 WARN slow query took 2300 ms
2026-03-02 08:31:17 INFO user 1042 logged in
2026-03-02 08:31:52 ERROR payment 88213 failed: card declined
2026-03-02 08:45:09 INFO user 1042 logged out
2026-03-02 09:02:33 WARN disk usage at 81 percent
2026-03-02 09:15:00 INFO nightly report sent
2026-03-02 09:27:46 ERROR could not reach mail server
2026-03-02 09:28:10 INFO retrying mail server in 60 seconds
2026-03-02 09:29:11 INFO mail server reachable again
2026-03-02 09:40:25 INFO user 2277 logged in
2026-03-02 09:52:08 WARN cache miss rate at 35 percent
2026-03-02 10:01:44 INFO user 2277 logged out"""

TR_STEPS = """To replace a bicycle inner tube, first shift the chain onto the smallest \
rear cog so the wheel is easier to remove. Then open the brake release and the \
quick-release lever, and take the wheel out of the frame. Let any air that is \
left out of the tube by pressing the valve. After that, push one side of the \
tyre off the rim using two tyre levers, working your way around the wheel. \
Pull the old tube out, starting opposite the valve. Run your fingers carefully \
around the inside of the tyre to find any thorn or glass that caused the \
puncture, and remove it. Pump a little air into the new tube so it holds its \
shape, put the valve through the hole in the rim, and tuck the tube inside the \
tyre. Push the tyre back onto the rim with your thumbs. Inflate the tube to the \
pressure written on the side of the tyre. Finally, put the wheel back in the \
frame, close the quick-release lever and the brake release, and spin the wheel \
to check that it turns freely."""

TR_MD_TABLE = """| title | author | year | pages | shelf |
|---|---|---|---|---|
| The Salt Road | Mara Quell | 2011 | 312 | B4 |
| Lanterns Over Kell | Otto Barnsley | 1998 | 256 | A2 |
| A Short History of Rope | Ines Valcourt | 2019 | 188 | C1 |
| Winter at Gray Harbour | Mara Quell | 2015 | 344 | B4 |
| The Clockmaker's Notes | Devika Rao | 2007 | 220 | A7 |
| Seven Bridges North | Lotte Amsel | 2021 | 402 | C3 |
| Tea and Thunder | Otto Barnsley | 2003 | 275 | A2 |
| Small Rooms, Big Skies | Ife Adeyemi | 2017 | 198 | B1 |"""


PROMPTS = [
    # code_edit
    req("code-stock-hints", "code_edit",
        "Add type hints to every function in this Python module (the stock is a "
        "dict from str to int). Change nothing else and print the whole module.\n\n"
        "```python\n" + CODE_PY_STOCK + "\n```", 256),
    req("code-c-bufsize", "code_edit",
        "In this C function, replace the number 64 with a constant named BUF_SIZE "
        "defined by `#define BUF_SIZE 64` after the includes. Print the complete "
        "file.\n\n```c\n" + CODE_C_LINES + "\n```", 224),
    req("code-js-let", "code_edit",
        "Replace every `var` in this JavaScript code with `let`. Do not change "
        "anything else. Print the full code.\n\n```js\n" + CODE_JS_TIMER + "\n```", 224),
    req("code-sh-quotes", "code_edit",
        "Put double quotes around every variable expansion in this shell script "
        "(for example `$DEST` becomes `\"$DEST\"`). Print the whole script.\n\n"
        "```sh\n" + CODE_SH_BACKUP + "\n```", 224),
    # summarize
    req("sum-seed-library", "summarize",
        "Summarize this article in three sentences.\n\n" + SUM_SEEDS, 128),
    req("sum-outage", "summarize",
        "Summarize this incident report as three bullet points: what happened, "
        "how it was fixed, and what will be done next.\n\n" + SUM_OUTAGE, 160),
    req("sum-fair-decisions", "summarize",
        "List the decisions and tasks from these meeting notes as a bullet list. "
        "Put the person's name first where one is given.\n\n" + SUM_FAIR, 192),
    req("sum-lamp-reviews", "summarize",
        "Summarize these reviews as two short bullet lists, one titled Pros and "
        "one titled Cons.\n\n" + SUM_REVIEWS, 160),
    # rag_qa
    req("rag-bike-fee", "rag_qa", RAG_BIKES, 96),
    req("rag-museum-visit", "rag_qa", RAG_MUSEUM, 160),
    req("rag-train-times", "rag_qa", RAG_TRAINS, 128),
    req("rag-tool-reset", "rag_qa", RAG_TOOL, 128),
    # transform
    req("fmt-json-to-csv", "transform",
        "Convert this JSON array to CSV with a header row. Keep the keys in the "
        "same order.\n\n" + TR_JSON_ROWS, 192),
    req("fmt-recipe-table", "transform",
        "Turn this ingredient list into a Markdown table with the columns "
        "quantity, unit and ingredient.\n\n" + TR_INGREDIENTS, 224),
    req("fmt-yaml-to-json", "transform",
        "Convert this YAML configuration to JSON. Keep every key and value and use "
        "an indentation of two spaces.\n\n```yaml\n" + TR_YAML + "\n```", 256),
    req("fmt-log-to-json", "transform",
        "Convert each of these log lines into a JSON object with the keys "
        "\"time\", \"level\" and \"message\", one object per line (JSON Lines).\n\n"
        + TR_LOGS, 256),
    # chat
    req("chat-hike-pack", "chat",
        "I am going on a two-day hiking trip in the mountains in autumn. What "
        "should I pack? Give me a short list.", 192),
    req("chat-compiler", "chat",
        "Explain what a compiler does to someone who has never written a program.", 160),
    req("chat-thanks-note", "chat",
        "Write a short thank-you note to my colleague Jonas, who helped me move "
        "house last weekend.", 128),
    req("chat-sleep-tips", "chat",
        "Give me three simple tips for falling asleep more easily.", 160),
    # math
    req("math-flour", "math",
        "A recipe uses 250 grams of flour to make 10 cookies. How much flour do I "
        "need for 36 cookies? Explain step by step.", 128),
    req("math-rectangle", "math",
        "A rectangle has a perimeter of 46 cm and one side is 15 cm long. What is "
        "its area? Show your working.", 160),
    req("math-savings", "math",
        "Sara has 30 dollars and saves 12 dollars every week. After how many weeks "
        "will she have at least 150 dollars? Explain your answer.", 128),
    req("math-discount", "math",
        "A jacket costs 240 euros. What is 15 percent of 240, and what does the "
        "jacket cost after a 15 percent discount? Show the steps.", 128),
]

HELDOUT = [
    # chat
    req("ho-chat-bakery", "chat",
        "Suggest three names for a small bakery that only sells sourdough bread, "
        "with one sentence about each name.", 128),
    req("ho-chat-decline", "chat",
        "How can I politely decline a meeting invitation from my manager? Write "
        "a short example message.", 160),
    req("ho-chat-climate", "chat",
        "What is the difference between weather and climate? Keep it short.", 128),
    req("ho-chat-tea", "chat",
        "Describe how to make a cup of black tea in five simple steps.", 128),
    # math
    req("ho-math-speed", "math",
        "A car drives 180 km in 2.5 hours. What is its average speed, and how far "
        "does it go in 4 hours at that speed? Explain step by step.", 128),
    req("ho-math-change", "math",
        "Lena buys 3 notebooks at 2.40 euros each and one pen at 1.35 euros. She "
        "pays with a 10 euro note. How much change does she get?", 128),
    req("ho-math-consecutive", "math",
        "The sum of three consecutive whole numbers is 72. What are the numbers? "
        "Show your working.", 128),
    req("ho-math-tank", "math",
        "A water tank holds 600 litres and already contains 150 litres. A pump "
        "adds 25 litres every minute. How many minutes until the tank is full?", 128),
    # one of each input-grounded category
    req("ho-code-scores-docstrings", "code_edit",
        "Add a one-line docstring to each function in this Python code. Change "
        "nothing else and print the whole code.\n\n```python\n" + CODE_PY_SCORES
        + "\n```", 224),
    req("ho-sum-council", "summarize",
        "Summarize this news report in two or three sentences.\n\n" + SUM_COUNCIL, 128),
    req("ho-rag-gym", "rag_qa", RAG_GYM, 128),
    req("ho-fmt-md-to-csv", "transform",
        "Convert this Markdown table to CSV with a header row.\n\n" + TR_MD_TABLE, 192),
]


def write(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    write(os.path.join(here, "prompts.jsonl"), PROMPTS)
    write(os.path.join(here, "heldout.jsonl"), HELDOUT)
