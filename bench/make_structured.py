#!/usr/bin/env python3
"""Writes bench/structured.jsonl: a structured-output workload for `specula bench`.

Same format as bench/prompts.jsonl plus a "json_schema" per line: the
output of that request is constrained to JSON matching the schema.  Two
kinds of request, as an application or an agent framework sends them:

  extract  fields taken from a short text into a schema (a contact, an
           order, an event, a job ad, ...): the keys are fixed by the
           schema, the values are copied from the text.
  tool     a tool call: the user asks for something, the answer is
           {"name": ..., "arguments": {...}} for one of the tools listed in
           the system message; arguments come from the request.

Every name, place, product and figure is made up.  Free-text fields a
small model may run on (an email body) carry a maxLength, as a real tool's
schema would, so every answer fits its max_tokens and parses.

Run: python3 bench/make_structured.py > bench/structured.jsonl
"""
import json

EXTRACT = [
    ("contact", "Hi, this is Maria Ostrander from Pellham Logistics. You can reach me at "
     "maria.ostrander@pellham-logistics.example or on +44 20 7946 0113. I am the operations lead "
     "for the Leeds depot and I would like a call about the spring schedule.",
     {"type": "object", "properties": {
         "name": {"type": "string"}, "company": {"type": "string"}, "email": {"type": "string"},
         "phone": {"type": "string"}, "role": {"type": "string"}, "city": {"type": "string"}},
      "required": ["name", "company", "email", "phone", "role", "city"], "additionalProperties": False}),
    ("order", "Order 88213 was placed on 12 March by Tomas Verhoeven. He bought three packs of "
     "Brightline AA batteries, one Halden desk lamp and two Corvo notebooks. Shipping goes to "
     "14 Canal Street, Utrecht. He paid by credit card and asked for express delivery.",
     {"type": "object", "properties": {
         "order_id": {"type": "integer"}, "customer": {"type": "string"}, "date": {"type": "string"},
         "items": {"type": "array", "items": {"type": "object", "properties": {
             "product": {"type": "string"}, "quantity": {"type": "integer"}},
             "required": ["product", "quantity"], "additionalProperties": False}, "minItems": 1, "maxItems": 5},
         "address": {"type": "string"}, "payment": {"type": "string", "enum": ["credit card", "bank transfer", "cash"]},
         "express": {"type": "boolean"}},
      "required": ["order_id", "customer", "date", "items", "address", "payment", "express"],
      "additionalProperties": False}),
    ("event", "The Northfield Chess Club holds its autumn open on Saturday 18 October, starting at "
     "10:00 in the Northfield Library hall. Entry is 12 euros, juniors play free. Seven rounds of "
     "rapid chess; register with Piet Galloway before 15 October.",
     {"type": "object", "properties": {
         "title": {"type": "string"}, "organizer": {"type": "string"}, "date": {"type": "string"},
         "time": {"type": "string"}, "venue": {"type": "string"}, "fee_euros": {"type": "number"},
         "rounds": {"type": "integer"}, "contact": {"type": "string"}},
      "required": ["title", "organizer", "date", "time", "venue", "fee_euros", "rounds", "contact"],
      "additionalProperties": False}),
    ("job", "Kestrel Analytics is hiring a senior data engineer in Porto. The role is full time and "
     "hybrid, three days in the office. You need five years of Python and SQL and experience with "
     "Spark. Salary 58,000 to 66,000 euros. Apply by 30 November to jobs@kestrel.example.",
     {"type": "object", "properties": {
         "company": {"type": "string"}, "title": {"type": "string"}, "city": {"type": "string"},
         "remote": {"type": "string", "enum": ["onsite", "hybrid", "remote"]},
         "skills": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4},
         "salary_min": {"type": "integer"}, "salary_max": {"type": "integer"}, "apply_to": {"type": "string"}},
      "required": ["company", "title", "city", "remote", "skills", "salary_min", "salary_max", "apply_to"],
      "additionalProperties": False}),
    ("invoice", "Invoice INV-2291 from Brannock Plumbing to Elm Court Apartments, dated 2 June. "
     "Labour 4 hours at 65 per hour, parts 118.40, call-out fee 35. Total due 413.40, payable "
     "within 30 days to account NL91 ABNA 0417 1643 00.",
     {"type": "object", "properties": {
         "invoice_number": {"type": "string"}, "supplier": {"type": "string"}, "customer": {"type": "string"},
         "date": {"type": "string"}, "total": {"type": "number"}, "due_days": {"type": "integer"},
         "iban": {"type": "string"}},
      "required": ["invoice_number", "supplier", "customer", "date", "total", "due_days", "iban"],
      "additionalProperties": False}),
    ("review", "I bought the Solvik 2 running shoes last month. They are light and the grip on wet "
     "roads is great, but the laces keep coming undone and the sizing runs small. Four stars "
     "from me. - Jana K.",
     {"type": "object", "properties": {
         "product": {"type": "string"}, "rating": {"type": "integer"}, "reviewer": {"type": "string"},
         "pros": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
         "cons": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
         "sentiment": {"type": "string", "enum": ["positive", "mixed", "negative"]}},
      "required": ["product", "rating", "reviewer", "pros", "cons", "sentiment"], "additionalProperties": False}),
]

TOOLS = [
    {"name": "get_weather", "description": "Current weather and forecast for a city",
     "parameters": {"type": "object", "properties": {
         "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
         "days": {"type": "integer"}}, "required": ["city", "unit", "days"], "additionalProperties": False}},
    {"name": "book_table", "description": "Reserve a table at a restaurant",
     "parameters": {"type": "object", "properties": {
         "restaurant": {"type": "string"}, "date": {"type": "string"}, "time": {"type": "string"},
         "people": {"type": "integer"}, "name": {"type": "string"}},
      "required": ["restaurant", "date", "time", "people", "name"], "additionalProperties": False}},
    {"name": "send_email", "description": "Send an email",
     "parameters": {"type": "object", "properties": {
         "to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string", "maxLength": 160}},
      "required": ["to", "subject", "body"], "additionalProperties": False}},
    {"name": "search_flights", "description": "Search for flights",
     "parameters": {"type": "object", "properties": {
         "origin": {"type": "string"}, "destination": {"type": "string"}, "date": {"type": "string"},
         "passengers": {"type": "integer"}, "cabin": {"type": "string", "enum": ["economy", "business"]}},
      "required": ["origin", "destination", "date", "passengers", "cabin"], "additionalProperties": False}},
]

TOOL_REQUESTS = [
    ("weather", "What will the weather be like in Trondheim for the next 3 days? Use celsius."),
    ("table", "Book a table for 4 people at Casa Ribeira on 21 May at 19:30 under the name Okafor."),
    ("email", "Email priya.raman@example.org with the subject 'Slides for Thursday' and tell her "
              "the slides are attached and the meeting moved to 3 pm."),
    ("flight", "Find economy flights from Lisbon to Helsinki on 9 September for 2 passengers."),
    ("weather2", "Is it going to rain in Valparaiso tomorrow? Give me one day of forecast in fahrenheit."),
    ("table2", "Reserve a table at The Copper Kettle for 2 on 3 April at 12:15, name Lindqvist."),
]


def bounded(schema, limit=80):
    """Every free string gets a maxLength (as a real tool's schema would):
    a small model that starts to loop inside a string is then cut by the
    grammar, not by max_tokens."""
    if isinstance(schema, dict):
        if schema.get("type") == "string" and "enum" not in schema and "format" not in schema:
            schema.setdefault("maxLength", limit)
        for v in schema.values():
            bounded(v, limit)
    elif isinstance(schema, list):
        for v in schema:
            bounded(v, limit)
    return schema


def call_schema(tools):
    """A tool call: one of the tools, with its own argument schema."""
    return {"anyOf": [{"type": "object", "properties": {
        "name": {"const": t["name"]}, "arguments": t["parameters"]},
        "required": ["name", "arguments"], "additionalProperties": False} for t in tools]}


def main():
    for key, text, schema in EXTRACT:
        msg = ("Extract the details from the text below as a JSON object with the keys "
               + ", ".join(schema["properties"]) + ".\n\n" + text)
        print(json.dumps({"id": "extract-" + key, "category": "extract", "max_tokens": 256,
                          "messages": [{"role": "user", "content": msg}], "json_schema": bounded(schema)}))
    system = ("You can call these tools. Answer with one JSON object {\"name\": ..., \"arguments\": {...}}.\n"
              + "\n".join(json.dumps(t) for t in TOOLS))
    for key, req in TOOL_REQUESTS:
        print(json.dumps({"id": "tool-" + key, "category": "tool", "max_tokens": 160,
                          "messages": [{"role": "system", "content": system}, {"role": "user", "content": req}],
                          "json_schema": bounded(call_schema(TOOLS))}))


if __name__ == "__main__":
    main()
