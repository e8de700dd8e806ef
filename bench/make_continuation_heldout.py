#!/usr/bin/env python3
"""Writes bench/continuation-heldout.jsonl: text-continuation prompts for
pretrained models (Gemma 3 270M), held out from drafter training and
tuning like heldout.jsonl.  Six prose and six code prefixes of kinds and
languages that continuation.jsonl does not have (a speech, an abstract, a
biography, a review, an FAQ, a local history; Ruby, GitHub Actions YAML,
CSS, a Makefile, pytest, PHP).  Every name, place and figure is made up."""
import json
P = []
def add(i, cat, text): P.append({"id": i, "category": cat, "prompt": text, "max_tokens": 128})

add("prose-h1", "prose", """Friends, family, and the three people at the back who I am fairly sure came for the buffet: thank you for being here tonight.

I have known Daniel since we were eleven years old, when we were both assigned to the same table in Mrs. Okafor's science class because our surnames were next to each other on the register. On the first day he told me, with complete confidence, that he was going to build a rocket that could reach the moon. By the end of the week he had built one out of a washing-up liquid bottle and a great deal of tape, and it reached the roof of the bike shed, which at the time felt like roughly the same thing.

That is Daniel in a sentence. He aims absurdly high, he gets further than anyone expects, and he is never embarrassed about the distance in between. When he told me, four years ago, that he had met someone at a pottery class and that she was the cleverest, kindest and funniest person he had ever met, I assumed he was exaggerating again. Then I met Priya, and I realised that for once in his life Daniel had been understating things.

Priya, you have taught him many things. You have taught him that a kitchen can be cleaned before it is an emergency. You have taught him that""")

add("prose-h2", "prose", """Abstract

Urban street trees provide shade, reduce runoff and improve air quality, but their survival in the first years after planting is often poor. We followed 2,416 young trees planted between 2015 and 2018 along residential streets in a mid-sized city, recording their condition twice a year for five years. Trees were grouped by species, by the width of the planting strip and by whether residents had signed up to a voluntary watering programme.

Overall survival after five years was 71 percent. Survival was strongly associated with the width of the planting strip: trees in strips narrower than one metre survived at a rate of 58 percent, compared with 83 percent in strips wider than two metres. Participation in the watering programme raised survival by eleven percentage points on average, with the largest effect during the unusually dry summer of 2018. Differences between species were smaller than expected once strip width was taken into account.

These results suggest that the design of the planting site matters at least as much as the choice of species. We discuss the costs of widening planting strips during routine road maintenance and""")

add("prose-h3", "prose", """Margarethe Vogel was born in 1891 in a small town on the Moselle, the youngest of six children of a cooper and a seamstress. Her father died when she was nine, and the family moved to Trier, where her mother took in sewing and the older children went to work. Margarethe was allowed to stay at school only because a teacher, noticing her talent for mathematics, persuaded the parish to pay her fees.

In 1910 she became one of the first women admitted to study at the university in Bonn, where she attended lectures in astronomy while supporting herself by giving lessons in arithmetic to the children of local merchants. Her notebooks from these years, which survive in the university archive, are filled with careful observations of variable stars made from a borrowed telescope on the roof of her lodging house.

The war interrupted her studies. From 1915 to 1918 she worked as a computer at a military office, calculating firing tables, a job she later described as "the most precise and the most pointless work of my life." After the war she returned to Bonn and completed her doctorate in 1921 with a thesis on""")

add("prose-h4", "prose", """We had been meaning to try Lantern & Loaf since it opened in the old post office on Carver Street last spring, and on a wet Thursday evening we finally managed it. The room is lovely: high ceilings, the original tiled floor, and long wooden tables that encourage you to talk to strangers whether or not you had planned to. It was about two-thirds full when we arrived at seven, and the staff found us a corner table without any fuss.

The menu is short, which is usually a good sign, and changes every week. We started with the charred leeks with hazelnut butter, which were sweet, smoky and gone far too quickly, and a plate of house-cured trout with pickled cucumber that was fine but a little timid. The bread, baked on site, deserves its place in the restaurant's name: a dark, chewy sourdough with a crust that shatters when you tear it.

For mains my partner had the slow-cooked lamb shoulder with white beans, and I chose the mushroom and barley stew. The lamb was the highlight of the evening, falling apart at the touch of a fork, although the beans underneath needed more salt. My stew was""")

add("prose-h5", "prose", """Frequently asked questions

How do I reserve a study room?
Study rooms can be reserved up to seven days in advance through the library website or at the information desk on the ground floor. Each booking lasts up to two hours, and you may hold one booking per day. If you are more than fifteen minutes late, the room is released to the next person waiting.

Can I bring food and drink into the library?
Drinks in a container with a lid are welcome on every floor. Cold snacks may be eaten in the café area and in the group study rooms, but not in the silent reading room or near the special collections. Hot meals should be eaten in the café.

What happens if I return a book late?
We do not charge fines for most late returns. However, if an item is more than thirty days overdue, your account will be paused until it is returned or replaced, and you will not be able to borrow anything else. Items that other readers have requested must be returned within three days of a recall notice.

How do I print or scan documents?
Printers and scanners are available on the first floor next to the computer area. To print, you""")

add("prose-h6", "prose", """The old waterworks on the edge of the park was built in 1884 to pump clean water from the river to the growing town on the hill. For almost eighty years its two great steam engines, named Victoria and Albert by the men who tended them, ran day and night, burning up to six tons of coal a day in the coldest weeks of winter. The engine house, with its tall arched windows and polished brass railings, was as much a statement of civic pride as a piece of machinery.

When the town switched to electric pumps in 1961, the engines were left in place, partly because removing them would have meant taking down a wall. For the next thirty years the building was used as a council storeroom, and the engines slowly disappeared under tarpaulins, filing cabinets and broken furniture.

In 1993 a group of retired engineers, several of whom had worked at the waterworks as young men, formed a trust to restore them. It took eleven years, more than forty thousand hours of volunteer work and a great deal of patience with""")

add("code-h1", "code", """require 'json'
require 'time'

# Keeps track of books lent out by a small community library.
class LoanRegister
  LOAN_DAYS = 21

  Loan = Struct.new(:book_id, :member, :lent_at, :returned_at) do
    def due_at
      lent_at + LOAN_DAYS * 24 * 60 * 60
    end

    def overdue?(now = Time.now)
      returned_at.nil? && now > due_at
    end
  end

  def initialize
    @loans = []
  end

  def lend(book_id, member, at: Time.now)
    raise ArgumentError, "book #{book_id} is already out" if out?(book_id)

    loan = Loan.new(book_id, member, at, nil)
    @loans << loan
    loan
  end

  def return_book(book_id, at: Time.now)
    loan = @loans.find { |l| l.book_id == book_id && l.returned_at.nil? }
    raise ArgumentError, "book #{book_id} is not out" unless loan

    loan.returned_at = at
    loan
  end

  def out?(book_id)
    @loans.any? { |l| l.book_id == book_id && l.returned_at.nil? }
  end

  def overdue(now = Time.now)
""")

add("code-h2", "code", """name: build

on:
  push:
    branches: [main]
  pull_request:

jobs:
  test:
    runs-on: ubuntu-latest
    strategy:
      fail-fast: false
      matrix:
        python-version: ["3.10", "3.11", "3.12"]
    steps:
      - name: Check out the repository
        uses: actions/checkout@v4

      - name: Set up Python ${{ matrix.python-version }}
        uses: actions/setup-python@v5
        with:
          python-version: ${{ matrix.python-version }}
          cache: pip

      - name: Install dependencies
        run: |
          python -m pip install --upgrade pip
          pip install -r requirements.txt
          pip install pytest pytest-cov

      - name: Run the tests
        run: pytest --cov=src --cov-report=xml

      - name: Upload coverage
        uses: codecov/codecov-action@v4
        with:
          files: coverage.xml

  lint:
    runs-on: ubuntu-latest
    steps:
""")

add("code-h3", "code", """/* Layout for the recipe pages. */

:root {
  --accent: #b4532a;
  --text: #222;
  --muted: #6b6b6b;
  --card-bg: #fffaf5;
  --radius: 8px;
}

body {
  margin: 0;
  font-family: Georgia, "Times New Roman", serif;
  color: var(--text);
  background: #f4efe9;
  line-height: 1.6;
}

.recipe {
  max-width: 760px;
  margin: 2rem auto;
  padding: 2rem;
  background: var(--card-bg);
  border-radius: var(--radius);
  box-shadow: 0 2px 8px rgba(0, 0, 0, 0.08);
}

.recipe h1 {
  margin-top: 0;
  font-size: 2rem;
  color: var(--accent);
}

.recipe .meta {
  display: flex;
  gap: 1.5rem;
  font-size: 0.9rem;
  color: var(--muted);
}

.ingredients li {
""")

add("code-h4", "code", """# Build the photo tool and its tests.

CC      ?= cc
CFLAGS  ?= -O2 -g -Wall -Wextra -std=c11
LDFLAGS ?=
LDLIBS  := -lm -lpng

SRC     := $(wildcard src/*.c)
OBJ     := $(SRC:src/%.c=build/%.o)
TESTS   := $(wildcard tests/test_*.c)
TESTBIN := $(TESTS:tests/%.c=build/%)

.PHONY: all clean test install

all: build/phototool

build:
	mkdir -p build

build/%.o: src/%.c | build
	$(CC) $(CFLAGS) -Isrc -c -o $@ $<

build/phototool: $(OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

build/test_%: tests/test_%.c $(filter-out build/main.o,$(OBJ)) | build
	$(CC) $(CFLAGS) -Isrc -o $@ $^ $(LDLIBS)

test: $(TESTBIN)
""")

add("code-h5", "code", """import pytest

from shop.cart import Cart, Item, OutOfStock


@pytest.fixture
def cart():
    return Cart(stock={"apple": 10, "pear": 3, "plum": 0})


def test_new_cart_is_empty(cart):
    assert cart.total() == 0
    assert len(cart) == 0


def test_add_item_updates_total(cart):
    cart.add(Item("apple", price=0.5), quantity=4)
    assert cart.total() == pytest.approx(2.0)
    assert len(cart) == 4


def test_add_more_than_stock_raises(cart):
    with pytest.raises(OutOfStock):
        cart.add(Item("pear", price=0.8), quantity=5)


def test_add_out_of_stock_item_raises(cart):
    with pytest.raises(OutOfStock):
        cart.add(Item("plum", price=0.3))


def test_remove_item(cart):
    cart.add(Item("apple", price=0.5), quantity=2)
    cart.remove("apple")
    assert cart.total() == 0


def test_discount_code_applies_percentage(cart):
""")

add("code-h6", "code", """<?php

declare(strict_types=1);

namespace App\\Newsletter;

use InvalidArgumentException;
use PDO;

/**
 * Stores newsletter subscribers and their confirmation state.
 */
final class SubscriberRepository
{
    public function __construct(private PDO $db)
    {
    }

    public function add(string $email, string $name): int
    {
        if (!filter_var($email, FILTER_VALIDATE_EMAIL)) {
            throw new InvalidArgumentException("invalid email address: $email");
        }

        $stmt = $this->db->prepare(
            'INSERT INTO subscribers (email, name, token, created_at) VALUES (:email, :name, :token, NOW())'
        );
        $stmt->execute([
            'email' => strtolower($email),
            'name' => $name,
            'token' => bin2hex(random_bytes(16)),
        ]);

        return (int) $this->db->lastInsertId();
    }

    public function confirm(string $token): bool
    {
""")

import os
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "continuation-heldout.jsonl"), "w") as f:
    for p in P:
        f.write(json.dumps(p, ensure_ascii=False) + "\n")

