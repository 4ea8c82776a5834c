"""Distilling the offline draft ``smollm2-135m-draft`` from its target (SmolLM2-135M-Instruct).

The draft is the contract's "offline draft format": a ``LlamaForCausalLM`` with the target's config
except ``num_hidden_layers = L``, initialised from the target's first L layers, sharing the target's
frozen token embeddings and tied LM head (`specdec_lib.models.offline.build_student`). Only the
decoder layers and the final norm are trained.

Pipeline (all of it resumable; a run directory, by default ``distill_runs/smollm2-135m-draft``, holds
everything):

1. **Text.** The target samples continuations at temperature 1 (batched, KV cache) from the project's
   training prompts (`specdec_lib.data.load_prompts("train")`) and many self-made seed instructions
   (`seed_instructions`). For every position from the user turn on we keep the target's top-k next-token
   log-probabilities (``topk`` = 128 by default), so training never runs the target again. Shards are
   safetensors files under ``<run_dir>/data/``.
2. **Training.** Forward KL from the target's next-token distribution p to the student's q at T = 1, at
   every stored position (DistillSpec, Zhou et al. 2024, the FKL objective). With the top-k cache the KL is
   the exact KL between p and q coarsened to the k stored tokens plus one "rest" bucket
   (`topk_kl`); it equals the full KL when k = V and is a lower bound otherwise. AdamW on the layers and
   the final norm.
3. **Measurement.** On held-out prompts (``split="heldout"``) the target samples continuations; the mean
   acceptance rate at T = 1 is the mean over those positions of ``sum_x min(p(x), q(x))`` (Leviathan et
   al. 2023, Eq. for beta), and the one-token forward times of draft and target are medians with a prefix
   KV cache of ``prefix_len`` tokens (`forward_time_ms`).
4. **Export.** Every checkpoint also writes the draft (``layers.safetensors`` in bfloat16 +
   ``draft.json`` with the training record and the acceptance measured on the *exported*, bf16-rounded
   weights) when its held-out acceptance is at least the best so far, so a run that is stopped at any
   time leaves a usable draft.

Command line::

    python -m specdec_lib.distill --minutes 60 --layers 2            # fresh run
    python -m specdec_lib.distill --minutes 30 --resume              # continue (more text, more steps)

Everything model-specific is in `run_offline`; `distill` itself works on any HF causal LM and token
lists (the tests and the notebook's smoke profile use a tiny random Llama).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUN_DIR = REPO_ROOT / "distill_runs" / "smollm2-135m-draft"
DEFAULT_EXPORT_DIR = REPO_ROOT / "data" / "models" / "smollm2-135m-draft"
TARGET_NAME = "smollm2-135m-instruct"
LAYERS_FILE = "layers.safetensors"
RECORD_FILE = "draft.json"

__all__ = [
    "DistillConfig", "Sample", "seed_instructions", "common_prefix_length", "sample_continuations",
    "save_samples", "load_samples", "topk_kl", "full_kl", "student_rows", "train_step",
    "acceptance_rate", "forward_time_ms", "trainable_parameters", "save_checkpoint", "load_checkpoint",
    "export_draft", "load_exported", "write_head_vocab", "measure_theory", "remeasure_export", "distill", "committed_record", "summary_table", "loss_curve_frame", "run_offline", "tiny_llama", "run_profile", "main",
]


# ----------------------------------------------------------------------------------------------------
# configuration


@dataclass
class DistillConfig:
    """Settings of one distillation run (stored in the checkpoint and in ``draft.json``)."""

    layers: int = 2                 # decoder layers of the student (the target's first L)
    lr: float = 5e-4                # AdamW learning rate (after a linear warm-up)
    warmup_steps: int = 30
    weight_decay: float = 0.0
    batch_size: int = 6             # sequences per training step
    grad_clip: float = 1.0
    topk: int = 128                 # target log-probs kept per position
    temperature: float = 1.0        # of the target samples and of the distillation targets
    gen_batch: int = 16             # sequences sampled together by the target
    new_tokens: int = 128           # new tokens per sampled continuation
    eval_prompts: int = 32          # held-out prompts used for the acceptance measurement
    eval_new_tokens: int = 96
    gen_minutes: float = 6.0        # per round: minutes of text generation ...
    train_minutes: float = 6.0      # ... then minutes of training, then evaluation + checkpoint + export
    decay_fraction: float = 0.25    # last fraction of the run's minutes: linear lr decay to 10 %
    prefix_len: int = 100           # prefix KV cache length for the forward timings
    timing_repeats: int = 21
    seed: int = 0
    export_dtype: str = "bfloat16"

    def validate(self) -> None:
        if self.layers < 1:
            raise ValueError(f"layers must be >= 1, got {self.layers}")
        if self.topk < 1:
            raise ValueError(f"topk must be >= 1, got {self.topk}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        for name in ("batch_size", "gen_batch", "new_tokens", "eval_prompts", "eval_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.export_dtype not in ("bfloat16", "float16", "float32"):
            raise ValueError(f"export_dtype must be bfloat16, float16 or float32, got {self.export_dtype!r}")


# ----------------------------------------------------------------------------------------------------
# training text


_TASKS = [
    "Explain {t} to a ten-year-old.", "Write a short story about {t}.", "List five facts about {t}.",
    "What are the pros and cons of {t}?", "Write a haiku about {t}.", "Give me three tips related to {t}.",
    "Describe {t} in one paragraph.", "Why is {t} important?", "Write a short poem about {t}.",
    "How does {t} work?", "Summarize the history of {t}.", "What are common misconceptions about {t}?",
    "Write a tweet about {t}.", "Write an email to a friend about {t}.", "Compare {t} with something similar.",
    "Give a step-by-step guide to getting started with {t}.", "What questions should I ask about {t}?",
    "Write a dialogue between two people discussing {t}.", "Tell me a fun fact about {t}.",
    "Write a product description involving {t}.", "Create a quiz with three questions about {t}.",
    "What would happen if {t} disappeared?", "Write a news headline and a short article about {t}.",
    "Explain the main ideas behind {t} in simple terms.", "Write a motivational message about {t}.",
    "Give an example that illustrates {t}.", "What is the future of {t}?", "Define {t}.",
    "Write a limerick about {t}.", "Argue for and against {t} in a short debate.",
    "How would you teach {t} to a beginner?", "Write a diary entry about {t}.",
    "What skills are needed for {t}?", "Describe a typical day involving {t}.",
    "Write the opening paragraph of a novel about {t}.", "What are the risks of {t}?",
    "Translate the idea of {t} into a metaphor.", "Give me a short outline for an essay on {t}.",
    "Write a recipe-style set of instructions for {t}.", "What do experts disagree about regarding {t}?",
]

_TOPICS = [
    "photosynthesis", "black holes", "the water cycle", "machine learning", "the French Revolution",
    "climate change", "honey bees", "the stock market", "volcanoes", "the human heart", "recycling",
    "a lost cat", "friendship", "time management", "electric cars", "the moon landing", "ancient Egypt",
    "coffee", "the internet", "gardening", "dinosaurs", "sleep", "meditation", "chess", "the ocean",
    "rainforests", "democracy", "vaccines", "social media", "renewable energy", "a rainy day",
    "learning a new language", "the Roman Empire", "robots", "bread baking", "mountains", "birds",
    "public speaking", "budgeting", "the solar system", "music theory", "football", "video games",
    "smartphones", "the immune system", "earthquakes", "libraries", "a haunted house", "space travel",
    "the printing press", "penguins", "electricity", "a job interview", "healthy eating", "running",
    "cloud computing", "the Renaissance", "a dragon", "trees", "winter", "a birthday party", "bicycles",
    "cryptography", "the brain", "deserts", "pirates", "a small town", "kindness", "online privacy",
    "the scientific method", "gravity", "the periodic table", "world war two", "origami", "volunteering",
    "a robot who wants to be human", "traveling to Japan", "a detective", "writing code",
    "Python programming", "sorting algorithms", "prime numbers", "fractions", "probability",
    "the Pythagorean theorem", "inflation", "renting an apartment", "a camping trip", "tea",
    "the Great Wall of China", "artificial intelligence", "elephants", "the desert at night",
    "starting a business", "teamwork", "stress", "a garden in spring", "painting", "photography",
    "the Olympic Games", "first aid", "pollution", "a spaceship crew", "a talking tree", "airplanes",
    "the history of money", "habits", "memory", "dreams", "the Amazon river", "a new school",
    "board games", "cooking pasta", "yoga", "the theory of evolution", "DNA", "magnets", "rainbows",
    "a cozy cafe", "city life", "farming", "wolves", "a mysterious letter", "quantum computers",
    "nutrition labels", "saving money", "email etiquette", "a museum visit", "pizza", "sharks",
    "the Arctic", "a king and a queen", "wind turbines", "a marathon", "the alphabet", "calendars",
]

_STANDALONE = [
    "Hi! How are you today?", "What is 17 times 23? Show your work.", "Write a Python function that reverses a string.",
    "Write a Python function to check whether a number is prime.", "What is the capital of Australia?",
    "Can you help me plan a weekend trip?", "Tell me a joke.", "What should I cook for dinner tonight?",
    "How do I make a cup of tea?", "Write a SQL query that counts rows in a table named users.",
    "Explain the difference between a list and a tuple in Python.", "What is 2 to the power of 10?",
    "Give me a random word and its definition.", "Suggest a name for a pet goldfish.",
    "What is the boiling point of water in Fahrenheit?", "How many days are there in a leap year?",
    "Write a thank-you note to a teacher.", "What are the primary colors?", "Solve for x: 3x + 5 = 20.",
    "Write a JavaScript function that adds two numbers.", "How can I improve my handwriting?",
    "Recommend three classic books.", "What is the difference between weather and climate?",
    "Write a bash command that lists all files in a directory.", "What does HTML stand for?",
    "Convert 5 kilometers to miles.", "What is the largest planet in our solar system?",
    "Write a short bedtime story.", "Give me a workout plan for beginners.", "What is a noun?",
]


_SENTENCES = [
    "The library opens at nine in the morning.", "My brother bought a new bicycle last week.",
    "We should leave early to avoid the traffic.", "The soup is too hot to eat right now.",
    "She has been working at the hospital for ten years.", "Can you recommend a good restaurant nearby?",
    "The weather will be sunny tomorrow afternoon.", "I forgot my umbrella at the office.",
    "The children painted pictures of their favourite animals.", "Our flight was delayed by two hours.",
    "He reads the newspaper every morning with his coffee.", "The concert starts at eight o'clock.",
    "Please close the window before you leave.", "This book is much more interesting than the film.",
    "They are planning a trip to the seaside in July.", "The shop on the corner sells fresh bread.",
    "I would like to book a table for four people.", "The river flooded the fields after the storm.",
    "Learning a new language takes patience and practice.", "The cat is sleeping on the warm windowsill.",
]
_LANGUAGES = ["German", "French", "Romanian", "Spanish", "Italian", "Portuguese", "Dutch"]
_PASSAGES = [
    "A small bakery in the old town started giving its unsold bread to a local shelter every evening. The owner said "
    "she hated throwing food away. Within a month, two other shops joined the scheme, and the shelter now receives "
    "enough bread for breakfast every day.",
    "Scientists tracking a group of whales found that the animals travelled more than eight thousand kilometres in "
    "a single season. The whales followed warm currents and stopped near islands where food was plentiful. The team "
    "hopes the data will help protect the routes from heavy shipping.",
    "The village school was about to close because only twelve pupils remained. Parents organised an online "
    "campaign describing the school's garden and its music lessons. Several young families moved to the village, "
    "and the school now has thirty-one pupils.",
    "A new bicycle lane opened along the river last spring. At first many drivers complained about losing parking "
    "spaces. After six months, local shops reported more customers, and the number of cyclists on the route tripled.",
    "During a power cut that lasted two days, neighbours in one street shared their camping stoves and candles. "
    "An elderly resident organised a shared dinner in her garden. People later said the outage brought the street "
    "closer together than years of ordinary life.",
    "A museum asked visitors to vote on which painting should be restored first. More than five thousand people took "
    "part. The winner was a small landscape that had been stored in the basement for forty years, and its "
    "restoration revealed a hidden signature.",
    "Engineers designed a cheap water filter made of sand, charcoal and a plastic bucket. In field tests it removed "
    "most bacteria from river water. The design is now taught in schools so that families can build their own.",
    "A football club from a small town reached the national cup final for the first time. Most of its players have "
    "other jobs, including a teacher, a plumber and a nurse. Thousands of fans travelled to the capital to watch "
    "the match, which the club lost by a single goal.",
    "Researchers found that people who took a short walk after lunch felt more alert in the afternoon. The effect "
    "was strongest for walks outdoors. The researchers suggest that companies encourage short breaks instead of "
    "longer working hours.",
    "A family discovered a box of letters in the attic of their new house. The letters were written by a soldier to "
    "his sister more than a hundred years ago. The family traced the soldier's descendants and returned the letters "
    "to them.",
    "The city council replaced old street lamps with LED lights that dim when nobody is around. The change cut the "
    "city's lighting bill by almost half. Some residents worried about safety, but crime figures did not change.",
    "A teenager built a robot from recycled parts that sorts plastic bottles by colour. She entered it in a "
    "national science fair and won first prize. A recycling company has offered to help her develop the idea.",
]
_INSTRUCTIONS_SUM = ["Summarize the following passage in two sentences.", "Summarize the following passage in one sentence.",
                     "Give a short summary of the following text.", "What is the main point of this text?"]
_CODE_TASKS = [
    "reverses a list", "checks whether a number is prime", "counts the vowels in a string",
    "returns the largest element of a list", "computes the factorial of n", "removes duplicates from a list",
    "converts Celsius to Fahrenheit", "sorts a list of words by length", "checks whether two strings are anagrams",
    "returns the sum of the digits of a number", "finds the second largest number in a list",
    "merges two dictionaries", "reads a text file and counts its lines", "computes the average of a list",
    "checks whether a year is a leap year", "flattens a nested list", "returns the n-th triangular number",
    "validates an email address with a regular expression", "computes the greatest common divisor of two numbers",
    "capitalizes the first letter of every word", "finds the most common element in a list",
    "implements binary search", "generates all subsets of a set", "rotates a list by k positions",
]
_CODE_LANGS = ["Python", "Python", "Python", "JavaScript", "C", "Java", "Rust", "Go"]
_NAMES = ["Anna", "Ben", "Carl", "Dina", "Eva", "Finn", "Gina", "Hugo", "Ines", "Jon", "Kim", "Lea", "Max", "Nora"]
_ROLES = [
    "a patient museum guide", "a ship's cook in the 1700s", "a friendly hotel receptionist",
    "a strict but fair chess coach", "a wizard who runs a small bakery", "a customer support agent for a bank",
    "a retired astronaut visiting a school",
    "a park ranger", "a detective in 1920s London", "a nervous first-time actor backstage", "a tour guide in Kyoto",
    "a veterinarian", "a pirate captain", "a medieval innkeeper", "a robot butler", "a football manager after a loss",
    "a kind grandmother", "a personal finance advisor", "a lighthouse keeper", "a barista in a busy cafe",
]
_ROLE_REQUESTS = [
    "A visitor asks you about {t}. Respond in character.", "Someone asks for your advice on {t}. Respond to them.",
    "A child asks you a question about {t}. Answer in a way they will understand.",
    "A customer complains about {t}. Respond politely and helpfully.",
    "Give a short speech about {t} to the people around you.",
    "A stranger wants to know your opinion of {t}. Respond in character.",
]
_EXTRACT_TEXTS = [
    "Hi team, the budget review moves to Tuesday 4 June at 10:00 in room 2.14. Omar will present the figures and "
    "Keiko will take notes. Please send questions to finance@example.com before Monday.",
    "Order #58213: 2 x cotton T-shirt (12.50 each), 1 x canvas bag (8.00), 3 x socks (4.20 each). Shipping 3.95. "
    "Delivered to 7 Willow Road, Leeds on 18 May.",
    "Dr Amara Osei, a marine biologist at the University of Cape Town, and Professor Lars Berg of Uppsala University "
    "presented their joint study on Atlantic cod at a conference in Bergen in October 2022.",
    "The apartment has two bedrooms, a balcony facing south and a small garden. Rent is 1,150 euros a month, "
    "heating included. It is available from 1 August and pets are allowed.",
    "Match report: the Falcons beat the Rovers 78-71. Jo Park scored 24 points, Ana Ruiz added 17 and Ben Cole "
    "grabbed 11 rebounds. The next game is on Saturday against the Tigers.",
    "Take one tablet twice a day after meals for seven days. Do not exceed four tablets in 24 hours. Store below "
    "25 degrees Celsius and keep out of the reach of children.",
]
_EXTRACT_ASKS = [
    "Extract all the numbers in the following text and what each refers to, as a JSON list.",
    "Extract the people, places and organisations mentioned in the following text as JSON with the keys "
    "\"people\", \"places\" and \"organisations\".",
    "Extract the key facts from the following text as a bulleted list.",
    "Extract the events in the following text, in order, as a numbered list.",
    "Extract any dates, times and prices from the following text as JSON.",
]
_STEM_TASKS = [
    "Explain how {t} works, step by step.", "What physical or chemical principles are behind {t}?",
    "Describe the main engineering challenges in designing {t}.", "Explain {t} to a first-year university student.",
    "What are the key equations or quantities used to describe {t}? Explain what each means.",
    "How would you design a simple experiment to study {t}?",
]
_STEM_TOPICS = [
    "a refrigerator", "a wind turbine", "a nuclear fusion reactor", "the human lungs", "a microwave oven",
    "solar panels",
    "photosynthesis", "an electric motor", "a bicycle's gears", "DNA replication", "ocean tides", "a rocket engine",
    "a touchscreen", "the immune response to a virus", "a hydraulic press", "semiconductors", "lightning",
    "a water treatment plant", "antibiotics", "a computer's memory", "sound waves", "an airplane wing",
    "rust and corrosion", "a seismometer", "nerve signals", "a hydroelectric dam",
]
_HUMANITIES_TASKS = [
    "What were the causes and consequences of {t}?", "Explain the main ideas of {t}.",
    "Why is {t} still discussed today?", "Describe the historical context of {t}.",
    "What can {t} teach us about the society that produced it?", "Compare {t} with a similar movement or period.",
]
_HUMANITIES_TOPICS = [
    "the Reformation", "Stoicism", "Cubism", "the Hundred Years' War", "Greek mythology", "the Enlightenment",
    "the Meiji Restoration", "Romanticism in poetry", "the abolition of slavery", "Buddhist philosophy",
    "the Mughal Empire", "the French Revolution", "Gothic novels", "the Cold War", "Byzantine art",
    "the scientific revolution", "the Tang dynasty", "modernist literature", "the American civil rights movement",
    "Renaissance humanism", "Aristotle's ethics", "the Aztec civilisation", "Dutch Golden Age painting",
    "the fall of Constantinople",
]
_PASSAGE_QUESTIONS = [  # one question per entry of _PASSAGES, answerable from that passage alone
    "What does the bakery do with its unsold bread, and how many other shops joined?",
    "How far did the whales travel in one season?", "How many pupils does the village school have now?",
    "What happened to the number of cyclists on the river route after six months?",
    "How long did the power cut last, and who organised the shared dinner?",
    "How many people voted on which painting to restore, and what did the restoration reveal?",
    "What materials is the cheap water filter made of?",
    "By how many goals did the small-town football club lose the cup final?",
    "When did a short walk make people feel more alert, according to the researchers?",
    "Who wrote the letters found in the attic, and to whom?", "By how much did the LED lights cut the lighting bill?",
    "What does the teenager's robot do, and what prize did it win?",
]


def _math_prompt(rng: random.Random) -> str:
    a, b, c = rng.randint(3, 99), rng.randint(3, 99), rng.randint(2, 9)
    forms = [
        f"What is {a} multiplied by {b}? Show the steps.", f"Solve for x: {c}x + {a} = {a + c * b}.",
        f"What is {rng.choice([5, 10, 12, 15, 20, 25, 30, 40])} percent of {a * 10}?",
        f"Simplify the fraction {a * c}/{b * c}.", f"A rectangle has a length of {a} cm and a width of {b} cm. "
        f"What are its area and perimeter?", f"What is the sum of the first {a} positive integers?",
        f"Convert {c}.{rng.choice([25, 5, 75])} hours into minutes.", f"What is the derivative of x^{c} + {a}x?",
        f"A shop sells pens for {c} euros each. How much do {a} pens cost?",
        f"If a car travels {a * c} km in {c} hours, what is its average speed?",
        f"What is {a * b} divided by {b}?", f"Find the next number in the sequence {a}, {a + c}, {a + 2 * c}, ...",
        f"What is the probability of drawing a red card from a standard deck? Explain.",
        f"Is {a * b + 1} a prime number? Explain.", f"What is {a} squared plus {b} squared?",
    ]
    return rng.choice(forms)


def _reasoning_prompt(rng: random.Random) -> str:
    x, y, z = rng.sample(_NAMES, 3)
    adj = rng.choice([("taller", "shortest"), ("older", "youngest"), ("faster", "slowest"), ("heavier", "lightest")])
    forms = [
        f"{x} is {adj[0]} than {y}, and {y} is {adj[0]} than {z}. Who is the {adj[1]}? Explain your reasoning.",
        f"A farmer has chickens and cows. There are {rng.randint(8, 20)} heads and an even number of legs. "
        f"Explain how to find the number of cows.",
        f"If it is {rng.choice(['sunny', 'cold', 'windy'])}, {x} goes {rng.choice(['to the park', 'cycling', 'to the beach'])}. "
        f"{x} did not go. What can we conclude? Explain the logic.",
        f"{x}, {y} and {z} sit in a row. {x} is not at either end. Who could sit on the left? Explain.",
        f"A train leaves at {rng.randint(6, 11)}:{rng.choice(['05', '20', '40', '55'])} and the trip takes "
        f"{rng.randint(1, 4)} hours and {rng.randint(5, 55)} minutes. When does it arrive? Show your reasoning.",
        f"{x} has {rng.randint(3, 20)} apples and gives {y} a third of them, rounded down. How many are left? Think step by step.",
    ]
    return rng.choice(forms)


def _math_word_problem(rng: random.Random) -> str:
    x, y = rng.sample(_NAMES, 2)
    a, b, c = rng.randint(3, 40), rng.randint(2, 12), rng.randint(2, 9)
    item = rng.choice(["apples", "books", "stickers", "marbles", "pencils", "cookies", "stamps"])
    forms = [
        f"{x} has {a} {item}. {y} has {c} times as many. {y} gives away {b}. How many {item} does {y} have left?",
        f"{x} buys {c} {item} at {b} euros each and pays with a {10 * ((b * c) // 10 + 1)}-euro note. "
        f"How much change does {x} get?",
        f"A bus carries {a} passengers. At the first stop {b} get off and {c} get on. At the second stop half of the "
        f"passengers get off, rounded down. How many passengers are left on the bus?",
        f"{x} saves {b * 5} euros every month and wants to buy something that costs {b * 5 * c + a} euros. How many "
        f"months must {x} save?",
        f"A farm has {a} cows and {b} times as many chickens. How many legs do the animals have altogether?",
        f"{x} reads {b} pages a day. The book has {b * (a + c)} pages and {x} has already read {b * c}. How many more "
        f"days does {x} need to finish it?",
        f"A recipe for {c} people uses {b * 50} g of flour. How much flour is needed for {c * 2 + 1} people?",
        f"{x} is {a} years old and {y} is {b} years older. What will the sum of their ages be in {c} years?",
        f"A shop sells {item} in packs of {c}. A teacher needs {a * 2 + 1} {item} for a class. How many packs must "
        f"she buy, and how many {item} will be left over?",
    ]
    return rng.choice(forms)


def seed_instructions(n: int, seed: int = 0) -> list[str]:
    """``n`` varied self-made user instructions, a deterministic function of ``seed``: open tasks x
    topics (writing, explanation, qa), stand-alone questions, templated arithmetic, word problems and
    logic puzzles, translations of everyday sentences, summaries of short passages, small coding tasks,
    role-play requests, extraction from short texts, science / engineering and humanities questions and
    questions over retrieved documents (the 13 categories of the project's prompt set). Used next to the
    project's training prompts for variety."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    combos = [task.format(t=topic) for task in _TASKS for topic in _TOPICS]
    rng.shuffle(combos)
    translations = [f"Translate the following English sentence into {lang}: {s}"
                    for s in _SENTENCES for lang in _LANGUAGES]
    summaries = [f"{ins}\n\n{p}" for p in _PASSAGES for ins in _INSTRUCTIONS_SUM]
    code = [f"Write a {lang} function that {task}." for task in _CODE_TASKS for lang in _CODE_LANGS]
    generated = [_math_prompt(rng) for _ in range(max(1, n // 6))] + [_reasoning_prompt(rng) for _ in range(max(1, n // 8))]
    roleplay = [f"You are {role}. {req.format(t=rng.choice(_TOPICS))}" for role in _ROLES for req in _ROLE_REQUESTS]
    extraction = [f"{ask}\n\n{text}" for text in _EXTRACT_TEXTS + _PASSAGES for ask in _EXTRACT_ASKS]
    stem = [task.format(t=topic) for task in _STEM_TASKS for topic in _STEM_TOPICS]
    humanities = [task.format(t=topic) for task in _HUMANITIES_TASKS for topic in _HUMANITIES_TOPICS]
    word_problems = [_math_word_problem(rng) for _ in range(max(1, n // 8))]
    rag = []
    for i, question in enumerate(_PASSAGE_QUESTIONS):  # the passage answering it among 1-3 distractors
        for _ in range(3):
            others = rng.sample([p for j, p in enumerate(_PASSAGES) if j != i], rng.randint(1, 3))
            docs = others + [_PASSAGES[i]]
            rng.shuffle(docs)
            body = "\n".join(f"Document {k}: {d}" for k, d in enumerate(docs, 1))
            rag.append(f"Answer the question using only the retrieved documents below.\n\n{body}\n\n"
                       f"Question: {question}")
    # tasks x topics dominate the combinations; keep them to about half of the mix
    pool = (list(_STANDALONE) + combos[: max(n // 2, 1)] + translations + summaries + code + generated
            + roleplay + extraction + stem + humanities + word_problems + rag)
    rng.shuffle(pool)
    out = []
    while len(out) < n:
        out.extend(pool[: n - len(out)])
    return out


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of token sequences (the chat template's system part)."""
    if not sequences:
        return 0
    first = list(sequences[0])
    n = len(first)
    for seq in sequences[1:]:
        seq = list(seq)
        m = 0
        while m < min(n, len(seq)) and seq[m] == first[m]:
            m += 1
        n = m
    return n


@dataclass
class Sample:
    """One training (or evaluation) sequence.

    ``tokens``: LongTensor [n]; rows r = 0 .. n-2-start hold the target's next-token distribution after
    ``tokens[: start + r + 1]``: ``topk_idx`` (LongTensor [R, k]) and ``topk_logp`` (float [R, k]), or
    ``topk_idx = None`` and ``topk_logp`` [R, V] = the full log-distribution in vocabulary order.
    ``prompt_len`` is the number of prompt tokens (rows from ``prompt_len - 1 - start`` on belong to the
    sampled continuation)."""

    tokens: torch.Tensor
    start: int
    prompt_len: int
    topk_idx: torch.Tensor | None
    topk_logp: torch.Tensor

    @property
    def num_rows(self) -> int:
        return int(self.topk_logp.shape[0])


@torch.no_grad()
def sample_continuations(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, topk: int,
                         generator: torch.Generator, eos_token_id: int | None = None, start: int = 0,
                         temperature: float = 1.0) -> list[Sample]:
    """The target samples one continuation per prompt (batched, left-padded, KV cache) at
    ``temperature``; returns `Sample` s whose rows are the target's top-``topk`` next-token log-probs at
    every position from ``start`` (clipped to the prompt) to the second-to-last token. Sampling stops at
    EOS (kept as the last token) or after ``max_new_tokens``. ``generator`` (CPU) is the only randomness.
    With ``topk >= vocab`` the rows are the full distributions."""
    if not prompts:
        return []
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    device = model.get_input_embeddings().weight.device
    lens = [len(p) for p in prompts]
    width = max(lens)
    batch = len(prompts)
    ids = torch.zeros(batch, width, dtype=torch.long)
    mask = torch.zeros(batch, width, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        mask[b, width - len(p):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device),
                use_cache=True)
    cache = out.past_key_values
    logp = torch.log_softmax(out.logits.float() / temperature, dim=-1).cpu()
    vocab = logp.shape[-1]
    k = min(topk, vocab)
    full = k >= vocab

    def pick(rows):  # full rows in vocabulary order (float16), else the top-k
        if full:
            return None, rows.half()
        vals, idx = rows.topk(k, dim=-1)
        return idx, vals

    starts = [min(start, n - 1) for n in lens]
    rows_idx: list[list[torch.Tensor]] = []
    rows_logp: list[list[torch.Tensor]] = []
    for b, n in enumerate(lens):
        idx, vals = pick(logp[b, width - n + starts[b]:])
        rows_idx.append([idx])
        rows_logp.append([vals])
    last = logp[:, -1]
    del out, logp
    generated: list[list[int]] = [[] for _ in range(batch)]
    alive = torch.ones(batch, dtype=torch.bool)
    step_pos = pos[:, -1:].clone()
    for step in range(max_new_tokens):
        nxt = torch.multinomial(last.exp(), 1, generator=generator).squeeze(1)
        for b in range(batch):
            if alive[b]:
                generated[b].append(int(nxt[b]))
                if eos_token_id is not None and int(nxt[b]) == eos_token_id:
                    alive[b] = False
        if step == max_new_tokens - 1 or not bool(alive.any()):
            break
        mask = torch.cat([mask, torch.ones(batch, 1, dtype=torch.long)], dim=1)
        step_pos = step_pos + 1
        out = model(input_ids=nxt.view(batch, 1).to(device), attention_mask=mask.to(device),
                    position_ids=step_pos.to(device), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        last = torch.log_softmax(out.logits[:, -1].float() / temperature, dim=-1).cpu()
        idx, vals = pick(last)
        for b in range(batch):
            if alive[b]:
                rows_idx[b].append(None if full else idx[b:b + 1])
                rows_logp[b].append(vals[b:b + 1])
    samples = []
    for b, p in enumerate(prompts):
        tokens = torch.as_tensor(list(p) + generated[b], dtype=torch.long)
        rows = len(tokens) - 1 - starts[b]
        idx = None if full else torch.cat(rows_idx[b])[:rows].long()
        vals = torch.cat(rows_logp[b])[:rows]
        samples.append(Sample(tokens, starts[b], len(p), idx, vals))
    return samples


def save_samples(samples: Sequence[Sample], path: Path | str, dtype: torch.dtype = torch.float16) -> None:
    """Write samples as one safetensors file (flat token / row arrays plus offsets); atomic."""
    from safetensors.torch import save_file

    if not samples:
        raise ValueError("no samples to save")
    full = samples[0].topk_idx is None
    if any((s.topk_idx is None) != full for s in samples):
        raise ValueError("cannot mix full-distribution and top-k samples in one file")
    tensors = {
        "tokens": torch.cat([s.tokens for s in samples]).to(torch.int32),
        "lengths": torch.tensor([len(s.tokens) for s in samples], dtype=torch.int64),
        "starts": torch.tensor([s.start for s in samples], dtype=torch.int64),
        "prompt_lens": torch.tensor([s.prompt_len for s in samples], dtype=torch.int64),
        "topk_logp": torch.cat([s.topk_logp for s in samples]).to(dtype),
    }
    if not full:
        tensors["topk_idx"] = torch.cat([s.topk_idx for s in samples]).to(torch.int32)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))
    os.replace(tmp, path)


def load_samples(path: Path | str) -> list[Sample]:
    """Inverse of `save_samples` (log-probs keep their stored dtype; the loss casts to float32)."""
    from safetensors.torch import load_file

    t = load_file(str(path))
    samples, tok_at, row_at = [], 0, 0
    for n, start, plen in zip(t["lengths"].tolist(), t["starts"].tolist(), t["prompt_lens"].tolist()):
        rows = n - 1 - start
        idx = t["topk_idx"][row_at:row_at + rows].long() if "topk_idx" in t else None
        samples.append(Sample(t["tokens"][tok_at:tok_at + n].long(), start, plen, idx,
                              t["topk_logp"][row_at:row_at + rows]))
        tok_at += n
        row_at += rows
    return samples


# ----------------------------------------------------------------------------------------------------
# loss and training


def topk_kl(student_logits: torch.Tensor, topk_idx: torch.Tensor, topk_logp: torch.Tensor,
            temperature: float = 1.0) -> torch.Tensor:
    """Per-row forward KL(p || q) between the target p (given by its top-k log-probs) and the student
    q = softmax(student_logits / T), both coarsened to the k stored tokens plus one bucket for the rest:

        KL = sum_{i in K} p_i (log p_i - log q_i) + r_p (log r_p - log r_q),  r = 1 - sum_{i in K} (.)_i.

    Exact full KL when K is the whole vocabulary (r_p = 0), a lower bound on it otherwise (log-sum
    inequality). ``topk_idx = None``: ``topk_logp`` is the full log-distribution. Returns a tensor [R]."""
    if topk_idx is None:
        return full_kl(topk_logp, student_logits, temperature)
    if student_logits.shape[:-1] != topk_idx.shape[:-1] or topk_idx.shape != topk_logp.shape:
        raise ValueError(f"shape mismatch: logits {tuple(student_logits.shape)}, idx {tuple(topk_idx.shape)}, "
                         f"logp {tuple(topk_logp.shape)}")
    logq = torch.log_softmax(student_logits.float() / temperature, dim=-1)
    logq_k = logq.gather(-1, topk_idx)
    logp_k = topk_logp.float()
    p_k = logp_k.exp()
    kl = (p_k * (logp_k - logq_k)).sum(-1)
    if topk_idx.shape[-1] < student_logits.shape[-1]:
        r_p = (1.0 - p_k.sum(-1)).clamp(min=0.0)
        r_q = (1.0 - logq_k.exp().sum(-1)).clamp(min=1e-12)
        kl = kl + r_p * (torch.log(r_p.clamp(min=1e-12)) - torch.log(r_q))
    return kl


def full_kl(target_logp: torch.Tensor, student_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Per-row exact KL(p || q) from full target log-probs [R, V] and student logits [R, V]."""
    if target_logp.shape != student_logits.shape:
        raise ValueError(f"shape mismatch: target {tuple(target_logp.shape)}, student {tuple(student_logits.shape)}")
    logq = torch.log_softmax(student_logits.float() / temperature, dim=-1)
    logp = target_logp.float()
    p = logp.exp()
    return (p * (logp - logq)).masked_fill(p == 0, 0.0).sum(-1)


def student_rows(student, samples: Sequence[Sample], continuation_only: bool = False) -> torch.Tensor:
    """Student logits [R, V] at the stored rows of ``samples`` (one right-padded forward; the LM head
    runs on the needed rows only). With ``continuation_only`` only the rows after the prompt."""
    device = student.get_input_embeddings().weight.device
    width = max(len(s.tokens) for s in samples)
    ids = torch.zeros(len(samples), width, dtype=torch.long)
    mask = torch.zeros(len(samples), width, dtype=torch.long)
    for b, s in enumerate(samples):
        ids[b, : len(s.tokens)] = s.tokens
        mask[b, : len(s.tokens)] = 1
    hidden = student.model(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
    picks = []
    for b, s in enumerate(samples):
        first = s.start + (max(s.prompt_len - 1 - s.start, 0) if continuation_only else 0)
        picks.append(hidden[b, first: len(s.tokens) - 1])
    return student.lm_head(torch.cat(picks))


def _rows(samples: Sequence[Sample], continuation_only: bool = False) -> tuple[torch.Tensor | None, torch.Tensor]:
    idx, logp = [], []
    for s in samples:
        skip = max(s.prompt_len - 1 - s.start, 0) if continuation_only else 0
        if s.topk_idx is not None:
            idx.append(s.topk_idx[skip:])
        logp.append(s.topk_logp[skip:])
    if idx and len(idx) != len(logp):
        raise ValueError("cannot mix full-distribution and top-k samples in one batch")
    return (torch.cat(idx) if idx else None), torch.cat(logp)


def trainable_parameters(student) -> dict[str, torch.nn.Parameter]:
    """The student-specific parameters (decoder layers and final norm); everything else frozen."""
    named = {}
    for name, p in student.named_parameters():
        if name.startswith("model.layers.") or name == "model.norm.weight":
            p.requires_grad_(True)
            named[name] = p
        else:
            p.requires_grad_(False)
    if not named:
        raise ValueError("the student has no decoder-layer parameters to train")
    return named


def train_step(student, optimizer: torch.optim.Optimizer, samples: Sequence[Sample], temperature: float = 1.0,
               grad_clip: float | None = 1.0) -> float:
    """One AdamW step on the mean forward KL over all stored rows of ``samples``; returns that loss."""
    student.train()
    logits = student_rows(student, samples)
    idx, logp = _rows(samples)
    device = logits.device
    loss = topk_kl(logits, None if idx is None else idx.to(device), logp.to(device), temperature).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], grad_clip)
    optimizer.step()
    student.eval()
    return float(loss.detach())


# ----------------------------------------------------------------------------------------------------
# measurement


@torch.no_grad()
def acceptance_rate(student, eval_samples: Sequence[Sample], temperature: float = 1.0,
                    batch_size: int = 8) -> dict:
    """Mean acceptance rate on target-sampled continuations: the mean over continuation positions of
    sum_x min(p(x), q(x)) (Leviathan et al. 2023, Sec. 3.3: beta = 1 - TV(p, q)), with p the target and
    q the student at ``temperature``. ``eval_samples`` must hold full target distributions (topk = V).
    Also returns the mean KL(p || q) and the per-depth means (position i of the continuation)."""
    if not eval_samples:
        raise ValueError("no evaluation samples")
    accept, kls, depth_sum, depth_cnt = [], [], {}, {}
    for at in range(0, len(eval_samples), batch_size):
        chunk = eval_samples[at: at + batch_size]
        logits = student_rows(student, chunk, continuation_only=True).float()
        idx, logp = _rows(chunk, continuation_only=True)
        if idx is not None:
            raise ValueError("acceptance_rate needs the target's full distributions (samples drawn with "
                             "topk >= vocabulary size), got top-k rows")
        p = logp.to(logits.device).float().exp()
        q = torch.softmax(logits / temperature, dim=-1)
        acc = torch.minimum(p, q).sum(-1).cpu()
        kl = (p * (torch.log(p.clamp(min=1e-30)) - torch.log(q.clamp(min=1e-30)))).sum(-1).cpu()
        accept.append(acc)
        kls.append(kl)
        at_row = 0
        for s in chunk:
            rows = len(s.tokens) - s.prompt_len
            for d in range(rows):
                depth_sum[d] = depth_sum.get(d, 0.0) + float(acc[at_row + d])
                depth_cnt[d] = depth_cnt.get(d, 0) + 1
            at_row += rows
    accept_all = torch.cat(accept)
    return {"mean": float(accept_all.mean()), "kl": float(torch.cat(kls).mean()),
            "positions": int(accept_all.numel()), "sequences": len(eval_samples),
            "by_depth": [depth_sum[d] / depth_cnt[d] for d in sorted(depth_sum)]}


@torch.no_grad()
def forward_time_ms(model, prefix_len: int = 100, repeats: int = 21, vocab: int | None = None,
                    seed: int = 0, reduce: Callable = statistics.median) -> float:
    """Median wall time (ms) of a one-token forward after a prefix KV cache of ``prefix_len`` random
    tokens (a fresh copy of the prefix cache for every call, copied outside the timed region; CUDA is
    synchronised)."""
    device = model.get_input_embeddings().weight.device
    vocab = vocab or int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, vocab, (1, prefix_len), generator=gen).to(device)
    token = torch.randint(0, vocab, (1, 1), generator=gen).to(device)
    base = model(input_ids=prefix, use_cache=True).past_key_values
    times = []
    for _ in range(repeats + 2):
        cache = copy.deepcopy(base)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(input_ids=token, past_key_values=cache, use_cache=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 1000.0 * reduce(times[2:])


def measure_forward_times(draft, target, prefix_len: int = 100, repeats: int = 21, rounds: int = 3) -> dict:
    """Draft and target one-token forward medians (ms), measured in alternating rounds so that load from
    other processes hits both alike; ``ratio`` = draft / target."""
    d, t, dmin, tmin = [], [], [], []
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for r in range(rounds):
        d.append(forward_time_ms(draft, prefix_len, repeats, seed=r))
        t.append(forward_time_ms(target, prefix_len, repeats, seed=r))
        dmin.append(forward_time_ms(draft, prefix_len, repeats, seed=r, reduce=min))
        tmin.append(forward_time_ms(target, prefix_len, repeats, seed=r, reduce=min))
    draft_ms, target_ms = statistics.median(d), statistics.median(t)
    return {"draft_ms": draft_ms, "target_ms": target_ms, "ratio": draft_ms / target_ms,
            "draft_min_ms": min(dmin), "target_min_ms": min(tmin), "ratio_of_minima": min(dmin) / min(tmin),
            "prefix_len": prefix_len, "repeats": repeats * rounds,
            "threads": torch.get_num_threads(), "device": str(draft.get_input_embeddings().weight.device),
            "load_average_1min": load_before,
            "note": "medians (and minima) of one-token forwards; on a shared CPU the load inflates the draft's "
                    "fixed per-call overhead more than the target's"}


# ----------------------------------------------------------------------------------------------------
# checkpoints and export


def _atomic_json(obj, path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def save_checkpoint(run_dir: Path | str, student, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Trainable weights (float32), AdamW moments and ``state`` (a JSON dict) under ``<run_dir>/ckpt``."""
    from safetensors.torch import save_file

    ckpt = Path(run_dir) / "ckpt"
    ckpt.mkdir(parents=True, exist_ok=True)
    params = trainable_parameters(student)
    weights = {k: v.detach().float().cpu().contiguous() for k, v in params.items()}
    ids = {id(p): k for k, p in params.items()}
    moments = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            st = optimizer.state.get(p)
            if st:
                name = ids[id(p)]
                moments[name + "::exp_avg"] = st["exp_avg"].detach().cpu().contiguous()
                moments[name + "::exp_avg_sq"] = st["exp_avg_sq"].detach().cpu().contiguous()
                moments[name + "::step"] = torch.as_tensor(float(st["step"])).reshape(1)
    save_file(weights, str(ckpt / "student.tmp"))
    os.replace(ckpt / "student.tmp", ckpt / "student.safetensors")
    if moments:
        save_file(moments, str(ckpt / "optim.tmp"))
        os.replace(ckpt / "optim.tmp", ckpt / "optim.safetensors")
    _atomic_json(state, ckpt / "state.json")


def load_checkpoint(run_dir: Path | str, student, optimizer: torch.optim.Optimizer) -> dict | None:
    """Restore what `save_checkpoint` wrote; returns the state dict, or None when there is none."""
    from safetensors.torch import load_file

    ckpt = Path(run_dir) / "ckpt"
    if not (ckpt / "state.json").is_file():
        return None
    state = json.loads((ckpt / "state.json").read_text())
    params = trainable_parameters(student)
    weights = load_file(str(ckpt / "student.safetensors"))
    if set(weights) != set(params):
        raise ValueError(f"checkpoint in {ckpt} does not fit this student ({len(weights)} tensors vs "
                         f"{len(params)}; layers in checkpoint: {state.get('config', {}).get('layers')})")
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(weights[k].to(p.dtype))
    if (ckpt / "optim.safetensors").is_file():
        moments = load_file(str(ckpt / "optim.safetensors"))
        for k, p in params.items():
            if k + "::exp_avg" in moments:
                optimizer.state[p] = {"step": torch.tensor(float(moments[k + "::step"][0])),
                                      "exp_avg": moments[k + "::exp_avg"].to(p.device, p.dtype),
                                      "exp_avg_sq": moments[k + "::exp_avg_sq"].to(p.device, p.dtype)}
    return state


def _student_tensors(student) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous() for k, v in student.state_dict().items()
            if k.startswith("model.layers.") or k == "model.norm.weight"}


def export_draft(student, out_dir: Path | str, record: dict, dtype: str = "bfloat16") -> Path:
    """Write the contract's draft format: ``layers.safetensors`` (``model.layers.{i}.*`` and
    ``model.norm.weight`` in ``dtype``) and ``draft.json`` (``record`` + ``num_hidden_layers``,
    ``base_model``, ``dtype``). Atomic per file. Returns ``out_dir``. A ``head_vocab.safetensors`` already
    in ``out_dir`` is kept and used when the draft is loaded; the record written here describes the
    full head until `remeasure_export` (``--remeasure``) measures the draft as deployed."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.to(getattr(torch, dtype)).cpu().contiguous() for k, v in _student_tensors(student).items()}
    save_file(tensors, str(out / "layers.tmp"), metadata={"format": "pt", "base_model": record.get(
        "base_model", TARGET_NAME)})
    os.replace(out / "layers.tmp", out / LAYERS_FILE)
    os.chmod(out / LAYERS_FILE, 0o644)
    full = {"num_hidden_layers": int(student.config.num_hidden_layers), "base_model": TARGET_NAME,
            "dtype": dtype}
    full.update(record)
    _atomic_json(full, out / RECORD_FILE)
    return out


def load_exported(target_model, out_dir: Path | str, head_vocab: bool = False):
    """Student built from ``target_model`` (HF module or LanguageModel) + ``layers.safetensors`` of
    ``out_dir``; with ``head_vocab``, also its sub-vocabulary head when ``out_dir`` has one (then the
    same as ``load_model("smollm2-135m-draft")`` for the committed draft). Training uses the full head."""
    from safetensors.torch import load_file

    from .models.offline import apply_head_vocab, build_student

    out = Path(out_dir)
    record = json.loads((out / RECORD_FILE).read_text())
    student = build_student(target_model, int(record["num_hidden_layers"]))
    state = load_file(str(out / LAYERS_FILE))
    expected = set(_student_tensors(student))
    if set(state) != expected:
        raise ValueError(f"{out / LAYERS_FILE} does not match a {record['num_hidden_layers']}-layer student")
    dtype = student.get_input_embeddings().weight.dtype
    student.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False)
    if head_vocab:
        apply_head_vocab(student, out)
    return student.eval()


class _RoundedWeights:
    """Context manager: the trainable weights rounded to the export dtype (and restored afterwards), so
    that measurements describe exactly the exported draft."""

    def __init__(self, student, dtype: str):
        self.params = trainable_parameters(student)
        self.dtype = getattr(torch, dtype)

    def __enter__(self):
        self.saved = {k: p.detach().clone() for k, p in self.params.items()}
        with torch.no_grad():
            for p in self.params.values():
                p.copy_(p.to(self.dtype).to(p.dtype))

    def __exit__(self, *exc):
        with torch.no_grad():
            for k, p in self.params.items():
                p.copy_(self.saved[k])
        return False


# ----------------------------------------------------------------------------------------------------
# the run


class _Log:
    def __init__(self, path: Path | None, echo: bool = True):
        self.path, self.echo = path, echo

    def __call__(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        if self.echo:
            print(line, flush=True)
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(line + "\n")


def _progress(total, desc, enabled):
    from .progress import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, mininterval=20, leave=False)


def _machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def _shards(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "data").glob("train_*.safetensors"))


def distill(target, run_dir: Path | str, train_prompts: Sequence[Sequence[int]],
            eval_prompts: Sequence[Sequence[int]], config: DistillConfig, minutes: float,
            export_dir: Path | str | None = None, resume: bool = False, eos_token_id: int | None = None,
            start: int = 0, theory_fn: Callable | None = None, extra_record: dict | None = None,
            progress: bool = True, echo: bool = True) -> dict:
    """Distil a ``config.layers``-layer student from the HF causal LM ``target`` for ``minutes``.

    Rounds of: sample text (``config.gen_minutes``; prompts cycle through ``train_prompts``, each batch
    a fresh sample), train (``config.train_minutes``; AdamW on the top-k forward KL over all stored
    rows, sequences drawn uniformly from all text so far), then evaluate on ``eval_prompts`` (acceptance
    at T = 1 on the rounded export weights), checkpoint, and export to ``export_dir`` when the acceptance
    is at least the best so far. ``start``: first position used for training (the common chat prefix is
    skipped). ``resume`` continues from ``<run_dir>/ckpt`` and reuses the cached text. ``theory_fn``
    (optional) maps (student, eval samples) to extra measured quantities stored in the record.
    Returns the final record (also in ``<run_dir>/record.json``)."""
    from .models.offline import build_student

    config.validate()
    if minutes <= 0:
        raise ValueError(f"minutes must be > 0, got {minutes}")
    if not train_prompts or not eval_prompts:
        raise ValueError("distill needs training and held-out prompts")
    run_dir = Path(run_dir)
    t_begin = time.time()
    deadline = t_begin + 60.0 * minutes
    run_dir.mkdir(parents=True, exist_ok=True)
    log = _Log(run_dir / "log.txt", echo)
    has_ckpt = (run_dir / "ckpt" / "state.json").is_file()
    if has_ckpt and not resume:
        raise ValueError(f"{run_dir} already holds a checkpoint: pass resume=True (--resume) or another run dir")

    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    student = build_student(target, config.layers)
    params = trainable_parameters(student)
    optimizer = torch.optim.AdamW(list(params.values()), lr=config.lr, weight_decay=config.weight_decay)
    state = load_checkpoint(run_dir, student, optimizer) if resume else None
    if state is not None:
        if state["config"]["layers"] != config.layers:
            raise ValueError(f"checkpoint has {state['config']['layers']} layers, asked for {config.layers}")
        log(f"resumed at step {state['steps']} ({state['train_seconds'] / 60:.1f} train min, "
            f"best acceptance {state.get('best_acceptance')})")
    else:
        state = {"steps": 0, "train_seconds": 0.0, "gen_seconds": 0.0, "prompt_cursor": 0, "resumes": 0,
                 "loss_curve": [], "evals": [], "best_acceptance": None, "initial": None}
    state["config"] = asdict(config)
    state["resumes"] = state.get("resumes", 0) + (1 if resume and state["steps"] else 0)
    gen = torch.Generator().manual_seed(config.seed * 1000 + state["resumes"] * 17 + len(_shards(run_dir)))
    rng = random.Random(config.seed * 1000 + state["resumes"])
    log(f"run dir {run_dir}; {len(train_prompts)} training prompts, {len(eval_prompts)} held-out prompts; "
        f"{minutes} min; config {asdict(config)}")

    # held-out evaluation set (full target distributions along target samples), generated once
    eval_path = run_dir / "data" / "eval.safetensors"
    if eval_path.is_file():
        eval_samples = load_samples(eval_path)
    else:
        t0 = time.time()
        eval_gen = torch.Generator().manual_seed(10_000 + config.seed)
        eval_samples = []
        chosen = list(eval_prompts)[: config.eval_prompts]
        for at in range(0, len(chosen), config.gen_batch):
            eval_samples += sample_continuations(target, chosen[at: at + config.gen_batch], config.eval_new_tokens,
                                                 topk=10 ** 9, generator=eval_gen, eos_token_id=eos_token_id,
                                                 start=10 ** 9, temperature=config.temperature)
        save_samples(eval_samples, eval_path)
        eval_samples = load_samples(eval_path)
        log(f"held-out set: {len(eval_samples)} continuations, "
            f"{sum(len(s.tokens) - s.prompt_len for s in eval_samples)} positions ({time.time() - t0:.0f} s)")

    def evaluate() -> dict:
        with _RoundedWeights(student, config.export_dtype):
            res = acceptance_rate(student, eval_samples, config.temperature)
            if theory_fn is not None:
                try:
                    res["theory"] = theory_fn(student, eval_samples)
                except Exception as exc:  # measurement extras must not kill a long run
                    res["theory_error"] = f"{type(exc).__name__}: {exc}"
        return res

    if state["initial"] is None:
        init = acceptance_rate(student, eval_samples, config.temperature)
        state["initial"] = {"acceptance": init["mean"], "kl": init["kl"]}
        log(f"untrained student: held-out acceptance {init['mean']:.4f}, KL {init['kl']:.3f}")

    samples = [s for path in _shards(run_dir) for s in load_samples(path)]
    timing = None
    ema = None
    round_no = 0

    def record_now(ev: dict) -> dict:
        n_rows = sum(s.num_rows for s in samples)
        curve = state["loss_curve"]
        stride = max(1, len(curve) // 200)
        rec = {
            "base_model": TARGET_NAME,
            "format": "offline draft format (team contract): model.layers.{i}.* + model.norm.weight; "
                      "embeddings and tied head shared with the target",
            "objective": f"forward KL(target || draft) at T={config.temperature}, top-{config.topk} + rest bucket",
            "training": {
                "sequences": len(samples), "tokens": sum(len(s.tokens) for s in samples),
                "trained_positions": n_rows, "steps": state["steps"],
                "train_minutes": state["train_seconds"] / 60, "generation_minutes": state["gen_seconds"] / 60,
                "lr": config.lr, "batch_size": config.batch_size, "layers": config.layers,
                "new_tokens_per_sample": config.new_tokens, "gen_batch": config.gen_batch,
                "loss_curve": curve[::stride], "final_loss_ema": ema, "config": asdict(config),
                "machine": _machine(),
            },
            "evaluation": {
                "split": "heldout", "temperature": config.temperature,
                "mean_acceptance": ev["mean"], "mean_kl": ev["kl"], "positions": ev["positions"],
                "sequences": ev["sequences"], "acceptance_by_depth": ev["by_depth"][:64],
                "untrained_acceptance": state["initial"]["acceptance"],
                "weights": f"exported {config.export_dtype} weights",
            },
            "forward_time": timing,
        }
        if "theory" in ev:
            rec["evaluation"].update(ev["theory"])
        if "theory_error" in ev:
            rec["evaluation"]["theory_error"] = ev["theory_error"]
        if extra_record:
            rec.update(extra_record)
        return rec

    rec = None
    reserve = min(40.0, 0.15 * 60.0 * minutes)  # seconds kept for the last evaluation and export
    while round_no == 0 or time.time() < deadline - reserve:
        round_no += 1
        # 1) more text
        t_gen_end = min(time.time() + 60.0 * config.gen_minutes, deadline - reserve)
        new = []
        bar = _progress(None, f"round {round_no}: sampling", progress)
        while time.time() < t_gen_end or (not samples and not new):
            batch = [train_prompts[(state["prompt_cursor"] + i) % len(train_prompts)]
                     for i in range(config.gen_batch)]
            state["prompt_cursor"] += config.gen_batch
            t0 = time.time()
            new += sample_continuations(target, batch, config.new_tokens, config.topk, gen, eos_token_id,
                                        start=start, temperature=config.temperature)
            state["gen_seconds"] += time.time() - t0
            bar.update(len(batch))
        bar.close()
        if new:
            save_samples(new, run_dir / "data" / f"train_{len(_shards(run_dir)):04d}.safetensors")
            samples += new
            log(f"round {round_no}: +{len(new)} sequences ({sum(s.num_rows for s in new)} positions); total "
                f"{len(samples)} sequences, {sum(s.num_rows for s in samples)} positions; "
                f"generation {state['gen_seconds'] / 60:.1f} min")
        # 2) training
        t_train_end = min(time.time() + 60.0 * config.train_minutes, deadline - reserve / 2)
        order: list[int] = []
        bar = _progress(None, f"round {round_no}: training", progress)
        first = True
        while first or time.time() < t_train_end:
            first = False
            if len(order) < config.batch_size:
                perm = list(range(len(samples)))
                rng.shuffle(perm)
                order += perm
            picks, order = order[: config.batch_size], order[config.batch_size:]
            warm = min(1.0, (state["steps"] + 1) / max(1, config.warmup_steps))
            left = max(0.0, deadline - time.time()) / (60.0 * minutes)
            decay = 1.0 if left >= config.decay_fraction else 0.1 + 0.9 * left / max(config.decay_fraction, 1e-9)
            for g in optimizer.param_groups:
                g["lr"] = config.lr * warm * decay
            t0 = time.time()
            loss = train_step(student, optimizer, [samples[i] for i in picks], config.temperature, config.grad_clip)
            state["train_seconds"] += time.time() - t0
            state["steps"] += 1
            ema = loss if ema is None else 0.95 * ema + 0.05 * loss
            if state["steps"] % 10 == 0:
                state["loss_curve"].append([state["steps"], round(ema, 5), round(state["train_seconds"] / 60, 3)])
            if state["steps"] % 50 == 0:
                log(f"step {state['steps']}: loss {loss:.4f} (ema {ema:.4f}), lr {config.lr * warm * decay:.2e}")
            bar.update(1)
        bar.close()
        # 3) measure, checkpoint, export
        ev = evaluate()
        state["evals"].append({"step": state["steps"], "acceptance": ev["mean"], "kl": ev["kl"],
                               "positions": sum(s.num_rows for s in samples),
                               "train_minutes": state["train_seconds"] / 60})
        if True:  # every round: a few seconds, and the machine's load changes
            with _RoundedWeights(student, config.export_dtype):
                timing = measure_forward_times(student, target, config.prefix_len, config.timing_repeats)
            log(f"forward one token (prefix {config.prefix_len}): draft {timing['draft_ms']:.2f} ms, "
                f"target {timing['target_ms']:.2f} ms, ratio {timing['ratio']:.3f}")
        rec = record_now(ev)
        save_checkpoint(run_dir, student, optimizer, state)
        best = state["best_acceptance"]
        exported = False
        if export_dir is not None and (best is None or ev["mean"] >= best):
            export_draft(student, export_dir, rec, config.export_dtype)
            exported = True
        state["best_acceptance"] = ev["mean"] if best is None else max(best, ev["mean"])
        save_checkpoint(run_dir, student, optimizer, state)
        _atomic_json(rec, run_dir / "record.json")
        log(f"round {round_no}: step {state['steps']}, held-out acceptance {ev['mean']:.4f} (KL {ev['kl']:.3f}, "
            f"{ev['positions']} positions){' -> exported' if exported else ''}; checkpoint saved")
    log(f"done after {(time.time() - t_begin) / 60:.1f} min")
    if rec is None:
        raise ValueError(f"minutes={minutes} left no time for a round")
    return rec


# ----------------------------------------------------------------------------------------------------
# the offline pair, profiles, CLI


def measure_theory(student, eval_samples: Sequence[Sample], max_children: int = 8, max_rows: int = 64,
                   num_samples: int = 8, keep_top: int | None = None, seed: int = 0) -> dict | None:
    """Sequoia's positional acceptance vector (children drawn without replacement) and ERSS's 0th-order
    accepted-index distribution r (exponential races), measured with `specdec_lib.theory`
    (``positional_acceptance`` / ``erss_index_distribution``, Monte Carlo with ``num_samples`` per row) on
    ``max_rows`` random held-out (target, draft) row pairs at T = 1.

    With ``keep_top`` the rows are restricted to the union over the chosen rows of each row's ``keep_top``
    most likely target and draft tokens and renormalised (cheaper; the dropped mass is reported as
    ``theory_dropped_mass``, the largest per row of p or q: a poorly trained draft is flat, so the default
    keeps the whole vocabulary). Returns None when `specdec_lib.theory` lacks these functions."""
    try:
        from . import theory
    except ImportError:
        return None
    positional = getattr(theory, "positional_acceptance", None)
    index_dist = getattr(theory, "erss_index_distribution", None)
    if positional is None or index_dist is None:
        return None
    rows_p, rows_q = [], []
    with torch.no_grad():
        for s in eval_samples:
            logits = student_rows(student, [s], continuation_only=True).float()
            _, logp = _rows([s], continuation_only=True)
            rows_p.append(logp.float().exp())
            rows_q.append(torch.softmax(logits, dim=-1))
    p, q = torch.cat(rows_p), torch.cat(rows_q)
    pick = torch.randperm(p.shape[0], generator=torch.Generator().manual_seed(seed))[:max_rows]
    p, q = p[pick].double(), q[pick].double()
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    keep = torch.ones(p.shape[1], dtype=torch.bool)
    if keep_top is not None and keep_top < p.shape[1]:
        keep[:] = False
        keep[p.topk(keep_top, dim=-1).indices.reshape(-1)] = True
        keep[q.topk(keep_top, dim=-1).indices.reshape(-1)] = True
    dropped = float(torch.maximum(p[:, ~keep].sum(-1), q[:, ~keep].sum(-1)).max()) if bool((~keep).any()) else 0.0
    p, q = p[:, keep], q[:, keep]
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    kw = dict(method="monte_carlo", num_samples=num_samples)
    seq = positional(p, q, max_children, "without_replacement", generator=torch.Generator().manual_seed(seed), **kw)
    r = index_dist(p, q, max_children, coupling="erss", generator=torch.Generator().manual_seed(seed), **kw)
    return {"sequoia_positional_acceptance": [float(x) for x in seq],
            "erss_r_vector": [float(x) for x in r],
            "theory_measurement": {"rows": int(p.shape[0]), "max_children": max_children,
                                   "num_samples": num_samples, "vocabulary_kept": int(keep.sum()),
                                   "theory_dropped_mass": dropped, "temperature": 1.0,
                                   "functions": "specdec_lib.theory.positional_acceptance(without_replacement), "
                                                "erss_index_distribution(erss)"}}


def _theory_extras():
    """`measure_theory` as a per-round hook for `distill` (None when the theory module lacks it)."""
    try:
        from . import theory
    except ImportError:
        return None
    if not (hasattr(theory, "positional_acceptance") and hasattr(theory, "erss_index_distribution")):
        return None
    return lambda student, eval_samples: measure_theory(student, eval_samples)


def write_head_vocab(export_dir: Path | str, run_dir: Path | str, size: int) -> dict:
    """Write ``head_vocab.safetensors`` to ``export_dir``: the ``size`` most frequent tokens of the run's
    target-generated training text (`subset_head.frequent_tokens`). Returns its description."""
    from safetensors.torch import save_file

    from .models.offline import DRAFT_HEAD_VOCAB_FILE
    from .models.subset_head import frequent_tokens

    shards = _shards(Path(run_dir))
    if not shards:
        raise ValueError(f"no training text under {Path(run_dir) / 'data'}: run the distillation first")
    texts = [s.tokens.tolist() for path in shards for s in load_samples(path)]
    ids = frequent_tokens(texts, size)
    save_file({"vocab_ids": torch.tensor(ids, dtype=torch.int64)}, str(Path(export_dir) / DRAFT_HEAD_VOCAB_FILE))
    return {"size": len(ids), "source": f"most frequent tokens of {sum(map(len, texts))} tokens of "
                                        f"target-sampled training text ({len(texts)} sequences)"}


def remeasure_export(export_dir: Path | str = DEFAULT_EXPORT_DIR, run_dir: Path | str = DEFAULT_RUN_DIR,
                     target_model: str = TARGET_NAME, device=None, theory: bool = True,
                     timing: bool = True, prefix_len: int = 100, repeats: int = 21,
                     head_vocab_size: int | None = None) -> dict:
    """Load the exported draft as it is deployed (`load_exported` with its head vocabulary), measure
    again on the run's held-out set (acceptance at T = 1; optionally the Sequoia / ERSS vectors via
    `measure_theory` and the forward times) and update its ``draft.json``. ``head_vocab_size`` first
    (re)writes the head vocabulary (`write_head_vocab`); the record then also holds the full head's
    acceptance and the target's mass outside the subset, for comparison. Returns the updated record."""
    from .models import load_model

    export_dir, run_dir = Path(export_dir), Path(run_dir)
    eval_path = run_dir / "data" / "eval.safetensors"
    if not eval_path.is_file():
        raise ValueError(f"no held-out set at {eval_path}: run the distillation first")
    lm = load_model(target_model, device=device)
    eval_samples = load_samples(eval_path)
    record = json.loads((export_dir / RECORD_FILE).read_text())
    if head_vocab_size:
        record["head_vocabulary"] = write_head_vocab(export_dir, run_dir, head_vocab_size)
    draft = load_exported(lm.model, export_dir, head_vocab=True)
    if "head_vocabulary" in record:
        full = acceptance_rate(load_exported(lm.model, export_dir), eval_samples)
        ids = draft.get_output_embeddings().vocab_ids
        outside = [1.0 - float(_rows([s], continuation_only=True)[1].float().exp()[:, ids].sum(-1).mean())
                   for s in eval_samples]
        record["head_vocabulary"].update(full_head_acceptance=full["mean"], full_head_kl=full["kl"],
                                         target_mass_outside=statistics.fmean(outside),
                                         note="mean_kl below is of the subset head: q = 0 outside it "
                                              "(clamped to 1e-30), so it is large by construction")
    res = acceptance_rate(draft, eval_samples)
    ev = record.setdefault("evaluation", {})
    ev.update({"mean_acceptance": res["mean"], "mean_kl": res["kl"], "positions": res["positions"],
               "sequences": res["sequences"], "acceptance_by_depth": res["by_depth"][:64]})
    if theory:
        extra = measure_theory(draft, eval_samples)
        if extra is not None:
            ev.update(extra)
            record.pop("theory_note", None)
    if timing:
        record["forward_time"] = measure_forward_times(draft, lm.model, prefix_len, repeats)
    _atomic_json(record, export_dir / RECORD_FILE)
    return record


def _project_prompts(split: str) -> list[str]:
    """Texts of the project's prompt set (`specdec_lib.data.load_prompts`; while that module is absent,
    the same records read from ``data/prompts/prompts.jsonl``)."""
    try:
        from .data import load_prompts
    except ImportError:
        path = REPO_ROOT / "data" / "prompts" / "prompts.jsonl"
        if not path.is_file():
            raise ValueError(f"no project prompts: neither specdec_lib.data nor {path} exists") from None
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [r["text"] for r in rows if split == "all" or r.get("split") == split]
    return [p.text for p in load_prompts(split=split)]


def run_offline(minutes: float, layers: int = 2, resume: bool = False, run_dir: Path | str = DEFAULT_RUN_DIR,
                export_dir: Path | str | None = DEFAULT_EXPORT_DIR, device=None, target_model: str = TARGET_NAME,
                config: DistillConfig | None = None, seeds: int = 6000, max_train_prompts: int | None = None,
                theory: bool = False, progress: bool = True, echo: bool = True) -> dict:
    """Distil the offline draft from ``target_model`` (default SmolLM2-135M-Instruct): prompts are the
    project's training prompts plus ``seeds`` self-made instructions (interleaved, one project prompt
    every few seeds), held-out prompts from ``load_prompts("heldout")``; see `distill`."""
    from .models import load_model

    config = config or DistillConfig(layers=layers)
    config.layers = layers
    lm = load_model(target_model, device=device)
    texts_train = _project_prompts("train")
    texts_eval = _project_prompts("heldout")
    seed_texts = seed_instructions(seeds, seed=config.seed)
    # interleave the project's prompts (each appears about every len(seeds)/len(train) prompts)
    mixed, every = [], max(1, len(seed_texts) // max(1, len(texts_train)))
    ti = 0
    for i, s in enumerate(seed_texts):
        if i % every == 0 and ti < len(texts_train):
            mixed.append(texts_train[ti])
            ti += 1
        mixed.append(s)
    mixed += texts_train[ti:]
    # the project's prompts first: they are closest to what the draft is used for
    prompts_text = texts_train + mixed
    if max_train_prompts is not None:
        prompts_text = prompts_text[:max_train_prompts]
    train_ids = [lm.encode(t).tolist() for t in prompts_text]
    eval_ids = [lm.encode(t).tolist() for t in texts_eval]
    start = common_prefix_length(train_ids + eval_ids)
    extra = {"prompts": {"project_train": len(texts_train), "seed_instructions": len(seed_texts),
                         "heldout": len(texts_eval), "skipped_prefix_tokens": start}}
    theory_fn = _theory_extras() if theory else None
    if theory_fn is None:
        extra["theory_note"] = ("Sequoia / ERSS vectors not measured during training (slow on the CPU: Monte "
                                "Carlo over a 49k vocabulary); see measure_theory")
    return distill(lm.model, run_dir, train_ids, eval_ids, config, minutes, export_dir=export_dir,
                   resume=resume, eos_token_id=lm.eos_token_id, start=start, theory_fn=theory_fn,
                   extra_record=extra, progress=progress, echo=echo)


def tiny_llama(vocab_size: int = 64, layers: int = 4, hidden: int = 32, seed: int = 0):
    """A tiny random ``LlamaForCausalLM`` (tied embeddings) for tests and the smoke profile."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, tie_word_embeddings=True, initializer_range=0.2)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # sharper, more structured distributions than the default init
        model.model.embed_tokens.weight.normal_(0, 1.0)
    return model.eval()


def run_profile(profile: str = "default", minutes: float | None = None, layers: int = 2, device=None,
                target_model: str = TARGET_NAME, run_dir: Path | str | None = None, progress: bool = False) -> dict:
    """What notebooks/00_distill_draft.ipynb runs.

    * ``smoke``: a tiny random Llama, a few seconds of sampling and training (into a temp dir).
    * ``default``: a short demo distillation of the real target (``minutes``, default 2) on a small freshly
      sampled text into a temp dir; the committed draft is NOT touched.
    * ``full``: the real run (`run_offline`, ``minutes`` default 60, resuming ``distill_runs/``) that
      writes ``data/models/smollm2-135m-draft``.
    Returns ``{"profile", "record", "run_dir"}`` (``record`` of the run just made)."""
    import tempfile

    if profile not in ("smoke", "default", "full"):
        raise ValueError(f"profile must be 'smoke', 'default' or 'full', got {profile!r}")
    if profile == "full":
        rec = run_offline(minutes or 60.0, layers=layers, resume=True, device=device, target_model=target_model,
                          run_dir=run_dir or DEFAULT_RUN_DIR, progress=progress)
        return {"profile": profile, "record": rec, "run_dir": str(run_dir or DEFAULT_RUN_DIR)}
    tmp = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix=f"distill_{profile}_"))
    if profile == "smoke":
        target = tiny_llama()
        gen = torch.Generator().manual_seed(0)
        prompts = [torch.randint(3, 64, (int(n),), generator=gen).tolist()
                   for n in torch.randint(2, 8, (40,), generator=gen)]
        cfg = DistillConfig(layers=min(layers, 3), lr=3e-3, batch_size=4, topk=16, gen_batch=8, new_tokens=16,
                            eval_prompts=8, eval_new_tokens=12, gen_minutes=0.05, train_minutes=0.1,
                            warmup_steps=2, timing_repeats=5, prefix_len=16)
        rec = distill(target, tmp, prompts[:32], prompts[32:], cfg, minutes or 0.25, export_dir=tmp / "export",
                      eos_token_id=None, progress=progress, echo=False)
        return {"profile": profile, "record": rec, "run_dir": str(tmp)}
    cfg = DistillConfig(layers=layers, lr=1e-3, warmup_steps=5, batch_size=4, gen_batch=8, new_tokens=32,
                        eval_prompts=6, eval_new_tokens=32, gen_minutes=0.3, train_minutes=1.0, timing_repeats=7)
    rec = run_offline(minutes or 2.0, layers=layers, resume=False, run_dir=tmp, export_dir=tmp / "export",
                      device=device, target_model=target_model, config=cfg, seeds=200, progress=progress,
                      echo=False)
    return {"profile": profile, "record": rec, "run_dir": str(tmp)}


def committed_record(directory: Path | str = DEFAULT_EXPORT_DIR) -> dict | None:
    """The committed draft's ``draft.json`` (None when there is no committed draft)."""
    path = Path(directory) / RECORD_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def summary_table(record: dict, acceptance_goal: float = 0.6, cost_goal: float = 0.25):
    """A one-column pandas table of a draft record: data, steps, acceptance (goal >= ``acceptance_goal``),
    forward times (goal: draft / target <= ``cost_goal``)."""
    import pandas as pd

    tr, ev, ft = record.get("training", {}), record.get("evaluation", {}), record.get("forward_time") or {}
    rows = {
        "layers": record.get("num_hidden_layers", tr.get("layers")),
        "training sequences": tr.get("sequences"), "training tokens": tr.get("tokens"),
        "trained positions": tr.get("trained_positions"), "steps": tr.get("steps"),
        "training minutes": round(tr.get("train_minutes", float("nan")), 1),
        "text generation minutes": round(tr.get("generation_minutes", float("nan")), 1),
        "learning rate": tr.get("lr"),
        "held-out acceptance (T=1), untrained": ev.get("untrained_acceptance"),
        "held-out acceptance (T=1)": ev.get("mean_acceptance"),
        f"acceptance goal >= {acceptance_goal}": (ev.get("mean_acceptance") or 0) >= acceptance_goal,
        "draft forward ms (1 token, cache)": ft.get("draft_ms"), "target forward ms": ft.get("target_ms"),
        "draft / target": ft.get("ratio"),
        f"cost goal <= {cost_goal}": (ft.get("ratio") or math.inf) <= cost_goal,
    }
    head = record.get("head_vocabulary")
    if head:
        rows["head vocabulary (most frequent tokens)"] = head.get("size")
        rows["held-out acceptance (T=1), full head"] = head.get("full_head_acceptance")
        rows["target mass outside the head vocabulary"] = head.get("target_mass_outside")
    if "sequoia_positional_acceptance" in ev:
        rows["Sequoia p_1..p_4"] = [round(x, 3) for x in ev["sequoia_positional_acceptance"][:4]]
    if "erss_r_vector" in ev:
        rows["ERSS r(1..4)"] = [round(x, 3) for x in ev["erss_r_vector"][:4]]
    return pd.DataFrame({"value": list(rows.values())}, index=list(rows.keys()))


def loss_curve_frame(record: dict, label: str = "draft"):
    """The recorded training loss curve (EMA of the KL) as a pandas frame: step, loss, minutes, run."""
    import pandas as pd

    curve = record.get("training", {}).get("loss_curve") or []
    return pd.DataFrame([{"step": c[0], "loss (KL, EMA)": c[1], "train minutes": c[2], "run": label} for c in curve])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specdec_lib.distill``: a distillation run (`run_offline`) or, with ``--remeasure``,
    a new measurement of the exported draft (`remeasure_export`)."""
    ap = argparse.ArgumentParser(prog="python -m specdec_lib.distill",
                                 description="Distil the offline draft smollm2-135m-draft from SmolLM2-135M-Instruct.")
    ap.add_argument("--minutes", type=float, default=None, help="wall-clock budget of this invocation")
    ap.add_argument("--remeasure", action="store_true",
                    help="only re-measure the exported draft (acceptance, Sequoia / ERSS vectors, timings)")
    ap.add_argument("--head-vocab", type=int, default=None,
                    help="with --remeasure: (re)write the draft's head vocabulary, the N most frequent tokens")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--resume", action="store_true", help="continue the checkpoint and text in --run-dir")
    ap.add_argument("--run-dir", default=str(DEFAULT_RUN_DIR))
    ap.add_argument("--export-dir", default=str(DEFAULT_EXPORT_DIR))
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--device", default=None)
    ap.add_argument("--target", default=TARGET_NAME)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    ap.add_argument("--seeds", type=int, default=6000, help="self-made seed instructions")
    defaults = DistillConfig()
    for name in ("lr", "batch_size", "topk", "gen_batch", "new_tokens", "eval_prompts", "eval_new_tokens",
                 "gen_minutes", "train_minutes", "decay_fraction", "seed"):
        ap.add_argument("--" + name.replace("_", "-"), type=type(getattr(defaults, name)),
                        default=getattr(defaults, name))
    ap.add_argument("--theory", action="store_true", help="measure Sequoia / ERSS vectors at every round (slow)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    if args.remeasure:
        rec = remeasure_export(args.export_dir, args.run_dir, args.target, args.device,
                               head_vocab_size=args.head_vocab)
        print(json.dumps({k: rec["evaluation"].get(k) for k in (
            "mean_acceptance", "sequoia_positional_acceptance", "erss_r_vector")}, indent=1))
        return 0
    if args.minutes is None:
        ap.error("--minutes is required (unless --remeasure)")
    cfg = DistillConfig(layers=args.layers, **{n: getattr(args, n) for n in (
        "lr", "batch_size", "topk", "gen_batch", "new_tokens", "eval_prompts", "eval_new_tokens",
        "gen_minutes", "train_minutes", "decay_fraction", "seed")})
    rec = run_offline(args.minutes, layers=args.layers, resume=args.resume, run_dir=args.run_dir,
                      export_dir=None if args.no_export else args.export_dir, device=args.device,
                      target_model=args.target, config=cfg, seeds=args.seeds, theory=args.theory,
                      progress=not args.no_progress)
    print(json.dumps({"mean_acceptance": rec["evaluation"]["mean_acceptance"],
                      "forward_time": rec["forward_time"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
