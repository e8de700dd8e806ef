/* Generated chat requests for self-distillation: everyday requests and
 * arithmetic word problems, put together from templates, word lists and
 * random numbers.  A chat head learns what the model says to requests
 * like its users' (advice, explanations, short texts, worked sums); the
 * corpus-snippet requests of distill.c alone teach it only to summarise
 * code and documentation.  Nothing here comes from the benchmark prompt
 * sets, which stay unseen. */
#include "train/train.h"

#include <stdio.h>
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

void sp_distill_request(char *buf, size_t cap, sp_rng *rng) {
    if (sp_rng_next(rng) % 3 == 0) word_problem(buf, cap, rng);
    else everyday(buf, cap, rng);
}
