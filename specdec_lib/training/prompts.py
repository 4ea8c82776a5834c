"""Self-made user instructions that both drafts' training text starts from (`seed_instructions`): open tasks x topics,
stand-alone questions, templated arithmetic, word problems and logic puzzles, translations, summaries,
coding, role-play, extraction, science and humanities questions, questions over retrieved documents."""

from __future__ import annotations

import random


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
        "What is the probability of drawing a red card from a standard deck? Explain.",
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
