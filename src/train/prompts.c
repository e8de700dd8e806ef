/* Generated prompts for self-distillation: chat requests (everyday
 * requests and arithmetic word problems, put together from templates, word
 * lists and random numbers, and requests about a text from the corpus:
 * summaries, answers, conversions, code edits) and, for pretrained models,
 * starts of prose and code to continue.  A head learns what the model
 * writes after prompts like its users'.  Nothing here comes from the
 * benchmark prompt sets, which stay unseen. */
#include "train/train.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_OF(a) (sizeof(a) / sizeof *(a))

static const char *pick(const char *const *list, size_t n, sp_rng *rng) {
    return list[sp_rng_next(rng) % n];
}

static const char *const activities[] = {
    "cooking dinner on a budget", "learning a new language", "keeping a small garden", "running a first 5 km race",
    "working from home", "saving money each month", "studying for an exam", "painting a room",
    "travelling with a small child", "starting to play the guitar", "keeping a houseplant alive",
    "writing a diary", "organising a birthday party", "cycling to work", "taking better photos with a phone",
    "packing for a beach holiday", "reading more books", "preparing for a job interview", "cleaning a kitchen",
    "camping in the rain",
};
static const char *const concepts[] = {
    "how the internet works", "what a database is", "why the sky is blue", "how vaccines work",
    "what inflation means", "how a refrigerator keeps food cold", "what an operating system does",
    "how bees make honey", "what a recipe in a cookbook is for", "how tides happen", "what a spreadsheet is",
    "how a bicycle gear works", "what photosynthesis is", "how a loan works", "what a password manager does",
    "why leaves change colour in autumn", "how rain forms", "what an algorithm is", "how a battery stores energy",
    "what a museum curator does",
};
static const char *const pairs[][2] = {
    { "a virus", "a bacterium" }, { "a lake", "a sea" }, { "a list", "a tuple in Python" },
    { "baking soda", "baking powder" }, { "a town", "a city" }, { "speed", "velocity" },
    { "a debit card", "a credit card" }, { "a frog", "a toad" }, { "memory", "storage in a computer" },
    { "an alligator", "a crocodile" }, { "a novel", "a short story" }, { "tea", "coffee" },
};
static const char *const writings[] = {
    "an email asking for a day off", "a birthday message for a friend", "a short apology for being late",
    "an invitation to a picnic", "a note welcoming a new neighbour", "a reminder about a team meeting",
    "a review of a small cafe", "a message congratulating a friend on a new job",
    "a short speech for a colleague who is retiring", "a poem about the sea", "a story for children about a lost cat",
    "a product description for a wooden chair",
};
static const char *const namings[] = {
    "a cat", "a small bookshop", "a podcast about cooking", "a football team of children", "a vegetable garden club",
    "a bicycle repair shop", "a board game", "a hiking group",
};
static const char *const tasks[] = {
    "boil an egg", "plant a tree", "change a bicycle tire", "make a paper plane", "wash a wool sweater",
    "set up a new phone", "make pancakes", "write a shopping list", "tie a tie", "brew coffee with a French press",
};
static const char *const names[] = { "Anna", "Tom", "Mia", "Omar", "Lucas", "Yuki", "Elena", "Ben", "Priya", "Karl" };
static const char *const items[] = { "apples", "pens", "tickets", "books", "plants", "cups", "shirts", "boxes" };

/* An everyday request. */
static void everyday(char *buf, size_t cap, sp_rng *rng) {
    const int n = 2 + (int)(sp_rng_next(rng) % 4);
    switch (sp_rng_next(rng) % 8) {
    case 0: snprintf(buf, cap, "Give me %d tips for %s.", n, pick(activities, N_OF(activities), rng)); break;
    case 1: snprintf(buf, cap, "Can you explain %s in simple words?", pick(concepts, N_OF(concepts), rng)); break;
    case 2: {
        const size_t i = sp_rng_next(rng) % N_OF(pairs);
        snprintf(buf, cap, "What is the difference between %s and %s?", pairs[i][0], pairs[i][1]);
        break;
    }
    case 3: snprintf(buf, cap, "Write %s.", pick(writings, N_OF(writings), rng)); break;
    case 4: snprintf(buf, cap, "Suggest %d names for %s.", n, pick(namings, N_OF(namings), rng)); break;
    case 5: snprintf(buf, cap, "How do I %s? List the steps.", pick(tasks, N_OF(tasks), rng)); break;
    case 6: snprintf(buf, cap, "What are the pros and cons of %s?", pick(activities, N_OF(activities), rng)); break;
    default: snprintf(buf, cap, "I want to start %s. Where should I begin?", pick(activities, N_OF(activities), rng));
    }
}

/* An arithmetic word problem with fresh numbers. */
static void word_problem(char *buf, size_t cap, sp_rng *rng) {
    const char *who = pick(names, N_OF(names), rng), *what = pick(items, N_OF(items), rng);
    const int a = 2 + (int)(sp_rng_next(rng) % 19), b = 3 + (int)(sp_rng_next(rng) % 47);
    const int c = 10 + (int)(sp_rng_next(rng) % 90), p = 5 * (1 + (int)(sp_rng_next(rng) % 9));
    switch (sp_rng_next(rng) % 7) {
    case 0: snprintf(buf, cap, "%s buys %d %s for %d dollars each. How much does %s pay in total?", who, a, what, b, who); break;
    case 1: snprintf(buf, cap, "A train travels %d km in %d hours. What is its average speed? Explain.", a * c, a); break;
    case 2: snprintf(buf, cap, "What is %d percent of %d? Show the calculation.", p, c * 10); break;
    case 3: snprintf(buf, cap, "A garden is %d m long and %d m wide. What are its area and its perimeter?", b, a); break;
    case 4:
        snprintf(buf, cap, "%s has %d %s and gives %d of them to each of %d friends. How many are left?", who, a * b + c,
                 what, b, a);
        break;
    case 5: snprintf(buf, cap, "Solve for x: %d x + %d = %d. Show your steps.", a, b, a * c + b); break;
    default:
        snprintf(buf, cap, "%s reads %d pages a day. How many days does a book of %d pages take? Explain your answer.",
                 who, a, a * b + (int)(sp_rng_next(rng) % (unsigned)a));
    }
}

/* How users start and end a request.  They multiply the templates'
 * few hundred requests: greedy answers to one request are all the same,
 * and a head learns nothing from the copies. */
static const char *const openers[] = { "", "", "", "Hi! ", "Please help me. ", "Quick question: ", "Hello. " };
static const char *const closers[] = { "", "", "", " Keep it short.", " Please be specific.",
                                       " Answer in a few sentences.", " Explain step by step.", " Thanks!" };

/* A request about a topic taken from the corpus (sp_distill_topic): the
 * everyday kinds, open to any word, so that the answers are about
 * thousands of subjects instead of the lists' hundred and seventy. */
static void about_topic(char *buf, size_t cap, const char *topic, sp_rng *rng) {
    const int n = 2 + (int)(sp_rng_next(rng) % 4);
    switch (sp_rng_next(rng) % 8) {
    case 0: snprintf(buf, cap, "Can you explain what \"%s\" means in simple words?", topic); break;
    case 1: snprintf(buf, cap, "Give me %d interesting facts about %s.", n, topic); break;
    case 2: snprintf(buf, cap, "Write a short story for children about %s.", topic); break;
    case 3: snprintf(buf, cap, "Write a short poem about %s.", topic); break;
    case 4: snprintf(buf, cap, "How would you explain %s to a ten-year-old?", topic); break;
    case 5: snprintf(buf, cap, "Write %d sentences that use the word \"%s\".", n, topic); break;
    case 6: snprintf(buf, cap, "Give me %d tips for dealing with %s.", n, topic); break;
    default: snprintf(buf, cap, "What should a beginner know about %s?", topic);
    }
}

bool sp_distill_request(char *buf, size_t cap, const char *topic, sp_rng *rng) {
    char req[448];
    bool about = false;
    if (sp_rng_next(rng) % 3 == 0) word_problem(req, sizeof req, rng);
    else if ((about = topic != NULL)) about_topic(req, sizeof req, topic, rng);
    else everyday(req, sizeof req, rng);
    const char *open = pick(openers, N_OF(openers), rng), *close = pick(closers, N_OF(closers), rng);
    snprintf(buf, cap, "%s%s%s", open, req, close);
    return about;
}

/* ----------------------------------------------------------------------------
 * Requests about a pasted text
 *
 * What users ask about a text they paste: summaries of a given length or
 * shape, answers from the text, format conversions, edits that print the
 * text again, and for code: comments, hints, explanations and reviews.
 * Many of these answers copy spans of the prompt, which a head can only
 * learn to predict from sequences where the prompt reaches it whole.
 * ------------------------------------------------------------------------- */

/* Words of code a rename request must not name. */
static bool keyword(const char *w, size_t n) {
    static const char *const kw[] = { "return", "import", "lambda", "assert", "global", "except", "finally",
                                      "continue", "nonlocal", "static", "struct", "unsigned", "sizeof", "typedef",
                                      "extern", "switch", "default", "define", "include", "double", "signed",
                                      "elif", "while", "yield", "raise", "print", "object", "string", "values" };
    for (size_t i = 0; i < N_OF(kw); i++)
        if (strlen(kw[i]) == n && !strncmp(kw[i], w, n)) return true;
    return false;
}

/* A name a rename request can take: not a keyword of code. */
static bool renamable(const char *w, size_t n) { return n >= 6 && !keyword(w, n); }

/* A word of ASCII letters from s that ok accepts (the first such word
 * from a random start), copied into w; false when s has none. */
static bool pick_word(const char *s, char *w, size_t cap, bool (*ok)(const char *, size_t), sp_rng *rng) {
    const size_t n = strlen(s);
    if (n == 0) return false;
    const size_t start = (size_t)(sp_rng_next(rng) % n);
    for (size_t k = 0; k < n; k++) {
        size_t i = (start + k) % n, len = 0;
        if (i > 0 && isalpha((unsigned char)s[i - 1])) continue;        /* a word's start */
        while (isalpha((unsigned char)s[i + len])) len++;
        if (len > 0 && len < cap && !isalnum((unsigned char)s[i + len]) && s[i + len] != '_' &&
            !(i > 0 && s[i - 1] == '_') && ok(s + i, len)) {
            memcpy(w, s + i, len);
            w[len] = 0;
            return true;
        }
    }
    return false;
}

/* A topic for a request: a lower-case word of 5 to 14 letters that is
 * neither a keyword of code nor one of the commonest words of prose. */
static bool topical(const char *w, size_t n) {
    static const char *const common[] = { "about", "after", "again", "being", "below", "could", "every", "first",
                                          "their", "there", "these", "those", "which", "where", "would", "should",
                                          "other", "under", "since", "using", "until", "above", "between",
                                          "before", "because", "through", "without", "within", "whether", "always",
                                          "never", "might", "shall", "against", "during", "following", "however",
                                          "therefore", "otherwise", "instead", "already", "another", "further" };
    if (n < 5 || n > 14 || keyword(w, n)) return false;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)w[i])) return false;
    for (size_t i = 0; i < N_OF(common); i++)
        if (strlen(common[i]) == n && !strncmp(common[i], w, n)) return false;
    return true;
}

bool sp_distill_topic(const char *text, char *out, size_t cap, sp_rng *rng) {
    return pick_word(text, out, cap, topical, rng);
}

static const char *const text_asks[] = {
    "Summarize this text in %d sentences.",
    "Summarize this text as %d bullet points.",
    "What are the main points of this text? Answer with a short list.",
    "Explain what the following is about.",
    "Rewrite the following text in plain language.",
    "Continue the following text.",
    "Write three questions about this text and answer them.",
    "Fix the spelling and grammar of the following text and print it in full.",
    "Turn the following into a JSON object with the keys \"topic\", \"summary\" and \"keywords\".",
    "Make a Markdown table of the facts in this text, with the columns Item and Detail.",
    "Rewrite the following as a numbered list of short statements.",
};
static const char *const code_asks[] = {
    "Add a short comment above every function in this code. Change nothing else and print the whole code.",
    "Explain what this code does.",
    "Summarize what this code does as %d bullet points.",
    "Find possible bugs in this code and explain how to fix them.",
    "Write a docstring for each function in this code.",
    "Rewrite this code so that it is easier to read, and print the whole code.",
    "List the functions in this code with their parameters as a JSON array.",
    "Write unit tests for this code.",
};

static char *format_ask(const char *fmt, int n) {
    char *b = sp_xmalloc(256);
    snprintf(b, 256, fmt, n);
    return b;
}

char *sp_distill_doc_request(const char *text, const char *lang, sp_rng *rng) {
    const int n = 2 + (int)(sp_rng_next(rng) % 4);
    char *ask, word[40];
    const uint64_t r = sp_rng_next(rng);
    if (lang) {
        if (!strcmp(lang, "python") && r % 5 == 0) ask = format_ask("Add type hints to every function in this "
                                                                    "Python code. Change nothing else and print the "
                                                                    "whole code.", 0);
        else if (r % 5 == 1 && pick_word(text, word, sizeof word, renamable, rng)) {
            ask = sp_xmalloc(256);
            snprintf(ask, 256, "Rename %s to a clearer name everywhere in this code and print the whole code.", word);
        } else ask = format_ask(code_asks[(r / 5) % N_OF(code_asks)], n);
    } else if (r % 4 == 0 && pick_word(text, word, sizeof word, renamable, rng)) {
        ask = sp_xmalloc(256);
        if ((r / 4) % 2) snprintf(ask, 256, "Answer from the text only: what does it say about \"%s\"?", word);
        else snprintf(ask, 256, "Where does the following text mention %s, and what does it say there?", word);
    } else ask = format_ask(text_asks[(r / 4) % N_OF(text_asks)], n);
    const size_t cap = strlen(ask) + strlen(text) + (lang ? strlen(lang) : 0) + 16;
    char *msg = sp_xmalloc(cap);
    /* the ask first or, now and then, after the text, as users write both */
    if (lang) snprintf(msg, cap, "%s\n\n```%s\n%s\n```", ask, lang, text);
    else if (r % 7 == 3) snprintf(msg, cap, "%s\n\n%s", text, ask);
    else snprintf(msg, cap, "%s\n\n%s", ask, text);
    free(ask);
    return msg;
}

/* ----------------------------------------------------------------------------
 * Starts of text for pretrained models
 *
 * A pretrained model is not asked anything: it continues text.  What it
 * writes after the start of a story, a letter, an article or a source
 * file is what a head for it must predict, and the corpus on a Debian
 * machine is mostly Python and license texts.  These starts, put together
 * from templates and word lists, let the model write prose of many kinds
 * and code in the common languages in its own words.
 * ------------------------------------------------------------------------- */

static const char *const towns[] = { "Eastbrook", "Millford", "Carrow", "Saltby", "Kellan Bay", "Northgate",
                                     "Ashwell", "Pine Hollow", "Redmoor", "Westerly" };
static const char *const weekdays[] = { "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday" };
static const char *const months[] = { "January", "March", "April", "June", "August", "September", "October",
                                      "November" };
static const char *const whens[] = { "On the morning of the first snow", "Late in the summer", "Every year in spring",
                                     "The night before the wedding", "Three days after the storm",
                                     "When the factory closed", "Long before the railway came" };
static const char *const deeds[] = {
    "found a key that fitted no door in the house", "took the early bus to the coast", "opened the shop for the last time",
    "received a letter from a brother who had been gone for years", "decided to walk the whole way home",
    "heard music coming from the empty school", "lost the map somewhere on the hill",
    "agreed to look after the neighbour's dog",
};
static const char *const subjects[][2] = {
    { "The red fox", "an animal" },      { "A glacier", "a slow river of ice" }, { "The violin", "a string instrument" },
    { "Copper", "a soft metal" },         { "The lighthouse", "a tower" },         { "The printing press", "a machine" },
    { "A coral reef", "an ecosystem" },   { "The honey bee", "an insect" },        { "Sourdough bread", "a bread" },
    { "The steam engine", "an engine" },  { "A volcano", "an opening in the crust of a planet" },
    { "The olive tree", "a tree" },
};
static const char *const products[] = { "electric kettle", "desk lamp", "rain jacket", "bicycle lock",
                                        "kitchen scale", "travel mug", "reading chair", "garden hose" };
static const char *const brands[] = { "Northwind", "Larch", "Brightside", "Pebble", "Oakline", "Tern" };
static const char *const dishes[] = { "Lentil soup", "Apple crumble", "Vegetable curry", "Banana bread",
                                      "Tomato salad", "Fish pie", "Pancakes with berries", "Mushroom risotto" };
static const char *const centuries[] = { "twelfth", "fifteenth", "seventeenth", "nineteenth", "early twentieth" };
static const char *const regions[] = { "the river valleys of the north", "the coastal cities", "the kingdom",
                                       "the mountain villages", "the trading ports", "the farming districts" };

/* A start of prose: one of ten kinds, one to three sentences. */
static void prose_start(char *buf, size_t cap, sp_rng *rng) {
    const char *who = pick(names, N_OF(names), rng), *town = pick(towns, N_OF(towns), rng);
    const int n = 2 + (int)(sp_rng_next(rng) % 27);
    switch (sp_rng_next(rng) % 10) {
    case 0:
        snprintf(buf, cap, "%s, %s %s. It was not the first time something strange had happened in %s,",
                 pick(whens, N_OF(whens), rng), who, pick(deeds, N_OF(deeds), rng), town);
        break;
    case 1: {
        const size_t i = sp_rng_next(rng) % N_OF(subjects);
        snprintf(buf, cap, "%s is %s that", subjects[i][0], subjects[i][1]);
        break;
    }
    case 2:
        snprintf(buf, cap, "%s — Officials announced on %s that the %s", town, pick(weekdays, N_OF(weekdays), rng),
                 sp_rng_next(rng) % 2 ? "old market hall will reopen next month after" : "town library will extend its opening hours");
        break;
    case 3: snprintf(buf, cap, "How to %s\n\n", pick(tasks, N_OF(tasks), rng)); break;
    case 4:
        snprintf(buf, cap, "Dear %s,\n\nThank you for your letter, which arrived on %s.", who,
                 pick(weekdays, N_OF(weekdays), rng));
        break;
    case 5:
        snprintf(buf, cap, "The %s %s\n\nDesigned for", pick(brands, N_OF(brands), rng),
                 pick(products, N_OF(products), rng));
        break;
    case 6:
        snprintf(buf, cap, "In the %s century, %s", pick(centuries, N_OF(centuries), rng),
                 pick(regions, N_OF(regions), rng));
        break;
    case 7: snprintf(buf, cap, "Day %d — %s\n\n", n, town); break;
    case 8: snprintf(buf, cap, "%s\n\nServes %d.\n\nIngredients:\n", pick(dishes, N_OF(dishes), rng), 2 + n % 5); break;
    default:
        snprintf(buf, cap, "%s %d\n\nDear diary,\n\nToday %s and I", pick(months, N_OF(months), rng), 1 + n, who);
    }
}

static const char *const programs[][2] = {
    { "a to-do list", "todo" },           { "the stock of a small shop", "inventory" },
    { "readings from temperature sensors", "sensor" }, { "bank accounts", "account" },
    { "a tic-tac-toe board", "board" },   { "command-line options", "options" },
    { "a priority queue", "pqueue" },     { "a cache with expiry times", "cache" },
    { "a recipe book", "recipe" },        { "small matrices", "matrix" },
    { "a playlist of songs", "playlist" }, { "an event calendar", "calendar" },
    { "a rate limiter", "limiter" },      { "a binary search tree", "tree" },
    { "orders exported as CSV", "orders" }, { "a countdown timer", "timer" },
};

/* A start of a source file: one of twelve languages, its usual opening
 * lines around what the program is for, after a copyright line in the
 * language's comments now and then (greedy continuations of one start are
 * all the same, and a head learns nothing from the copies). */
static void code_start(char *buf, size_t cap, sp_rng *rng) {
    const size_t i = sp_rng_next(rng) % N_OF(programs);
    const char *what = programs[i][0], *id = programs[i][1];
    char Id[24], body[384];
    snprintf(Id, sizeof Id, "%s", id);
    Id[0] = (char)toupper((unsigned char)Id[0]);
    const char *note = "// ";                    /* how the language starts a comment line */
    switch (sp_rng_next(rng) % 12) {
    case 0:
        snprintf(body, sizeof body, "\"\"\"Helpers for %s.\"\"\"\n\nimport json\nimport os\n\n\nclass %s:\n", what, Id);
        note = "# ";
        break;
    case 1: snprintf(body, sizeof body, "#include <stdio.h>\n#include <stdlib.h>\n\n/* %s */\nstruct %s {\n", what, id); break;
    case 2: snprintf(body, sizeof body, "// %s\n\n'use strict';\n\nfunction create%s(", what, Id); break;
    case 3:
        snprintf(body, sizeof body, "package %s\n\nimport (\n\t\"errors\"\n\t\"fmt\"\n)\n\n// %s holds %s.\ntype %s struct {\n",
                 id, Id, what, Id);
        break;
    case 4: snprintf(body, sizeof body, "use std::collections::HashMap;\n\n/// %s\npub struct %s {\n", what, Id); break;
    case 5:
        snprintf(body, sizeof body, "-- Tables for %s.\n\nCREATE TABLE %s (\n    id INTEGER PRIMARY KEY,\n", what, id);
        note = "-- ";
        break;
    case 6:
        snprintf(body, sizeof body, "# Maintenance script for %s.\nset -e\n\n", what);
        note = "# ";
        break;
    case 7:
        snprintf(body, sizeof body, "<!DOCTYPE html>\n<html>\n<head>\n  <title>%s</title>\n</head>\n<body>\n", Id);
        note = NULL;
        break;
    case 8:
        snprintf(body, sizeof body, "import java.util.ArrayList;\nimport java.util.List;\n\n/** %s */\npublic class %s {\n",
                 what, Id);
        break;
    case 9: snprintf(body, sizeof body, "#include <string>\n#include <vector>\n\n// %s\nclass %s {\npublic:\n", what, Id); break;
    case 10:
        snprintf(body, sizeof body, "# %s\n\n%s is a small library for %s.\n\n## Usage\n\n", id, id, what);
        note = NULL;
        break;
    default: snprintf(body, sizeof body, "export interface %s {\n  id: number;\n", Id);
    }
    const uint64_t c = sp_rng_next(rng) % 3;
    const int year = 2010 + (int)(sp_rng_next(rng) % 15);
    const char *who = pick(names, N_OF(names), rng);
    if (note && c == 1) snprintf(buf, cap, "%sCopyright (c) %d %s\n%s", note, year, who, body);
    else if (note && c == 2) snprintf(buf, cap, "%sWritten by %s, %d.\n\n%s", note, who, year, body);
    else snprintf(buf, cap, "%s", body);
}

void sp_distill_opener(char *buf, size_t cap, sp_rng *rng) {
    if (sp_rng_next(rng) % 2) prose_start(buf, cap, rng);
    else code_start(buf, cap, rng);
}
