"""Writes the example datasets of textbento's fine-tuning commands (deterministic; the CSVs are committed).

    python examples/support_tickets/make_dataset.py

- ``tickets.csv`` (text, label): customer-support tickets of a made-up online shop in five
  categories, for ``train_import.train_classifier``; ``tickets-eval.csv``: tickets written from
  templates that ``tickets.csv`` never uses, so that the held-out score measures new phrasings,
  not new fill-ins of phrasings seen in training.
- ``pairs.csv`` (anchor, positive): two customers describing the same specific problem in their
  own words, for ``train_import.train_embedder``.

Written for this project from templates and word lists below; any likeness to a real shop's
tickets is the nature of support tickets.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

PRODUCTS = [
    "order",
    "parcel",
    "subscription",
    "gift card",
    "blender",
    "headphones",
    "running shoes",
    "coffee maker",
    "desk lamp",
    "backpack",
    "phone case",
    "kettle",
    "yoga mat",
    "monitor",
    "keyboard",
]
OPENERS = ["Hi,", "Hello,", "Hey there,", "Good morning,", "Hi team,", "", "", "Dear support,", "Urgent:", "Quick question:"]
CLOSERS = [
    "Thanks.",
    "Please help.",
    "Thank you!",
    "",
    "",
    "Regards.",
    "Can you look into it?",
    "Any update would be great.",
    "This is frustrating.",
    "Cheers.",
]

TEMPLATES = {
    "billing": [
        "I was refunded only part of what I paid for the {p}.",
        "Why is there a monthly fee of {n} euros on my statement?",
        "The total on my invoice does not match what I paid for the {p}.",
        "Can I pay the {p} in three instalments instead of all at once?",
        "I need the invoice for order {o} in my company's name, not mine.",
        "My payment was declined but my bank says the card is fine.",
        "You charged shipping on the {p} although the site said shipping is free.",
        "I got a bill for a subscription I never signed up for.",
        "Please cancel the second charge of {n} euros on my card.",
        "The gift card balance was not deducted and I paid the {p} in full.",
        "How do I update the billing address on my invoices?",
        "My refund of {n} euros for the {p} has not reached my account after {d} days.",
        "I was charged twice for my {p}.",
        "My card shows two payments of {n} euros for one {p}.",
        "The invoice for my {p} has the wrong VAT number.",
        "Why did my bank statement show a charge of {n} euros I don't recognise?",
        "I need an invoice with my company address for the {p} I bought.",
        "The discount code was not applied and I paid full price for the {p}.",
        "You billed my old credit card even though I updated the payment method.",
        "My subscription renewed and charged {n} euros although I cancelled it last month.",
        "The price at checkout was higher than the {n} euros shown on the product page.",
        "Please send me a receipt for order {o}, my accountant needs it.",
        "Payment failed three times but the money left my account anyway.",
        "I was charged a currency conversion fee on the {p}, that was not mentioned.",
    ],
    "account_access": [
        "I forgot my password and the reset link says it has expired.",
        "My account says it is suspended and I don't know why.",
        "I can't sign in with my new email address.",
        "The verification code for my login never comes by SMS.",
        "Please unlock my account, I typed the wrong password too many times.",
        "I want to change my password but the settings page won't let me.",
        "My account was hacked and the password was changed.",
        "Logging in with Apple fails with an unknown error.",
        "How can I download all the personal data in my account?",
        "I keep getting signed out of my account on the website.",
        "The confirmation email to activate my account never arrived.",
        "I can't remember which email I used to register my account.",
        "I can't log in to my account, it says my password is wrong.",
        "The password reset email never arrives.",
        "My account got locked after too many attempts.",
        "I want to change the email address on my account.",
        "Two-factor authentication codes are not accepted anymore.",
        "Someone else logged into my account, I got a login alert from another country.",
        "How do I delete my account and all my data?",
        "I signed up with Google and now I can't set a password.",
        "The login page keeps redirecting me back to the start.",
        "I lost access to the phone number linked to my account.",
        "My username shows someone else's name after I logged in.",
        "Please merge my two accounts, I have orders on both.",
    ],
    "shipping": [
        "Where is my {p}? It was supposed to arrive yesterday.",
        "The courier says the address for order {o} is incomplete.",
        "My parcel has been stuck in customs for {d} days.",
        "Can I pick up the {p} at a store instead of home delivery?",
        "The delivery driver never rang the bell and took the {p} back.",
        "Do you deliver the {p} to a post office box?",
        "My order {o} shows as shipped but the tracking link does not work.",
        "I received someone else's parcel instead of my {p}.",
        "Please hold my delivery, I am away for {d} days.",
        "The {p} was sent to my old address.",
        "How much does express shipping for the {p} cost?",
        "The parcel with my {p} was returned to sender by mistake.",
        "My {p} has not arrived yet, order {o}.",
        "The tracking number for my {p} shows no updates for {d} days.",
        "The parcel was delivered to the wrong address.",
        "Tracking says delivered but there is nothing at my door.",
        "Can I change the delivery address for order {o}?",
        "The courier left my {p} with a neighbour I don't know.",
        "How long does shipping to Norway take for the {p}?",
        "My {p} arrived damaged, the box was crushed.",
        "Only half of my order arrived, the {p} is missing from the parcel.",
        "Delivery was promised in {d} days and it has been two weeks.",
        "Can you ship the {p} with express delivery instead?",
        "The pickup point closed and my parcel is stuck there.",
    ],
    "bug_report": [
        "The page goes blank when I try to apply a coupon code.",
        "The app shows the wrong price for the {p} compared to the website.",
        "I can't upload a photo for my review, the button is greyed out.",
        "The order confirmation page loads forever and never finishes.",
        "The search bar crashes the app when I type more than two words.",
        "Product reviews for the {p} show up twice on the page.",
        "The quantity field resets to 1 every time I open the cart.",
        "The website layout is broken on my tablet.",
        "Clicking 'track order' gives an error message since this morning.",
        "The app does not open at all after the latest update.",
        "Filters show {n} results but the list below is empty.",
        "The language switch button does nothing on the checkout page.",
        "The app crashes when I open the order history.",
        "The checkout button does nothing on Safari.",
        "Search returns no results for {p} even though it is in stock.",
        "The website shows an error 500 when I add the {p} to the cart.",
        "Images on the product page for the {p} don't load.",
        "The size filter resets every time I scroll down.",
        "I get logged out every time I switch to the mobile app.",
        "The cart shows {n} items but I only added one {p}.",
        "Dark mode makes the prices invisible on the product page.",
        "The app freezes on the payment screen on Android.",
        "Notifications arrive in German although my language is English.",
        "The wishlist page is blank since the last update.",
    ],
    "feature_request": [
        "Could you add the option to pay with PayPal?",
        "It would be nice to reorder my last purchase with one click.",
        "Please add a wishlist that I can share with friends.",
        "Could the app remember my preferred delivery slot?",
        "I'd like to get an email when the {p} is back in stock.",
        "Please add more colour options for the {p}.",
        "It would be useful to see reviews sorted by most recent.",
        "Could you add a gift card option for birthdays?",
        "Please support two-factor login with an authenticator app.",
        "I'd love a loyalty program with points for every purchase.",
        "Could you show the carbon footprint of each delivery?",
        "Please add a way to compare the {p} with similar items side by side.",
        "It would be great if I could pay with Apple Pay.",
        "Please add a way to save several delivery addresses.",
        "Could you offer gift wrapping for the {p}?",
        "I'd love a dark mode in the app.",
        "Please let me filter products by brand.",
        "Can you add a price-drop alert for the {p}?",
        "It would help to see delivery times before checkout.",
        "Could the app support split payments between two cards?",
        "Please add a size guide for the {p}.",
        "I'd like to schedule deliveries for a specific day.",
        "Could you add a comparison view for similar products like the {p}?",
        "Please offer a student discount program.",
    ],
}


HELD_OUT = 20  # templates 0-19 of each label write the training tickets, 20-23 the evaluation tickets


def ticket(rng: random.Random, template: str) -> str:
    body = template.format(p=rng.choice(PRODUCTS), n=rng.randint(9, 240), o=f"#{rng.randint(10000, 99999)}", d=rng.randint(3, 21))
    return " ".join(part for part in (rng.choice(OPENERS), body, rng.choice(CLOSERS)) if part)


# Pairs: one specific problem, said two ways (the positive is never the anchor's template).
PROBLEMS = [
    ("my {p} arrived broken", "the {p} was damaged when it was delivered"),
    ("I was charged twice for the {p}", "there are two payments for one {p} on my card"),
    ("the {p} never arrived", "I am still waiting for my {p}, it did not come"),
    ("the {p} is the wrong colour", "you sent me the {p} in a different colour than I ordered"),
    ("I want to return the {p}", "how do I send the {p} back for a refund"),
    ("the {p} stopped working after a week", "my {p} broke down just days after I got it"),
    ("the discount did not apply to the {p}", "my promo code was ignored when I bought the {p}"),
    ("the {p} is missing a part", "a piece of the {p} was not in the box"),
    ("I got someone else's {p}", "the parcel contained a {p} that is not mine"),
    ("can I cancel the {p} before it ships", "please stop my {p} order, it has not shipped yet"),
]
STYLES = ["{x}.", "Hi, {x}.", "{x}, please help.", "Hello, {x}. What can I do?", "{x}!", "Quick question: {x}."]


def main() -> None:
    rng = random.Random(7)
    for name, first, count in (("tickets.csv", 0, 80), ("tickets-eval.csv", HELD_OUT, 20)):
        with open(HERE / name, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["text", "label"])
            for label, templates in TEMPLATES.items():
                kept = templates[:HELD_OUT] if first == 0 else templates[HELD_OUT:]
                for index in range(count):
                    writer.writerow([ticket(rng, kept[index % len(kept)]), label])
    with open(HERE / "pairs.csv", "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["anchor", "positive"])
        for product in PRODUCTS:
            for first, second in PROBLEMS:
                anchor, positive = (first, second) if rng.random() < 0.5 else (second, first)
                style = rng.sample(STYLES, 2)
                writer.writerow([style[0].format(x=anchor.format(p=product)), style[1].format(x=positive.format(p=product))])


if __name__ == "__main__":
    main()
