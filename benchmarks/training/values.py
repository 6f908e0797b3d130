"""Argument values for the synthetic chats: cities, names, numbers, paths, emails, tickers.

Every value is split into train and held-out by a hash of its text (`is_heldout`), so the
trained models never see a held-out value and the held-out sets measure copying, not memory.
Real words come from the lists below; pseudo-words built from syllables give unbounded variety,
which is what teaches a small model to copy instead of to recall.
"""

from __future__ import annotations

import random
import zlib

HELDOUT_SHARE = 5  # one value in five (by hash) is held out


def is_heldout(value: str) -> bool:
    return zlib.crc32(value.encode()) % HELDOUT_SHARE == 0


CITIES = """Paris London Tokyo Berlin Madrid Rome Lima Oslo Cairo Delhi Sydney Toronto Chicago
Vienna Dublin Seoul Boston Lisbon Prague Nairobi Denver Hanoi Quito Athens Dallas Helsinki
Warsaw Budapest Zurich Geneva Brussels Amsterdam Copenhagen Stockholm Edinburgh Glasgow Munich
Hamburg Milan Naples Seville Porto Valencia Marseille Lyon Nice Bordeaux Reykjavik Marrakesh
Wellington Santiago Montreal Bogota Manila Jakarta Istanbul Ankara Beirut Amman Doha Dubai
Riyadh Tehran Karachi Lahore Mumbai Chennai Kolkata Dhaka Colombo Kathmandu Bangkok Yangon
Singapore Taipei Osaka Kyoto Busan Shanghai Beijing Shenzhen Perth Adelaide Brisbane Auckland
Vancouver Calgary Ottawa Seattle Portland Phoenix Austin Houston Miami Atlanta Detroit Memphis
Nashville Orlando Tampa Havana Kingston Panama Caracas Medellin Recife Salvador Montevideo
Asuncion Cordoba Rosario Mendoza Accra Lagos Dakar Kampala Kigali Lusaka Harare Maputo Luanda
Tunis Algiers Tripoli Khartoum Addis Mombasa Durban Pretoria Windhoek Gaborone Riga Tallinn
Vilnius Minsk Kyiv Odesa Sofia Bucharest Belgrade Zagreb Sarajevo Skopje Tirana Valletta
Nicosia Tbilisi Yerevan Baku Almaty Tashkent Bishkek Ulaanbaatar Vladivostok Novosibirsk Kazan
Lucerne Bern Basel Graz Salzburg Innsbruck Krakow Gdansk Poznan Brno Bratislava Ljubljana
Trieste Verona Bologna Florence Genoa Turin Palermo Bilbao Granada Malaga Toledo Leeds Bristol
Cardiff Belfast Cork Galway Bergen Malmo Aarhus Tampere Turku Utrecht Rotterdam Antwerp Ghent
Bruges Lille Nantes Rennes Toulouse Grenoble Dijon Strasbourg Cologne Dresden Leipzig Bremen
Hanover Stuttgart Frankfurt Nuremberg""".split()

CAPITALS = {
    "France": "Paris", "Japan": "Tokyo", "Italy": "Rome", "Spain": "Madrid", "Germany": "Berlin",
    "Peru": "Lima", "Norway": "Oslo", "Egypt": "Cairo", "Kenya": "Nairobi", "Greece": "Athens",
    "Portugal": "Lisbon", "Austria": "Vienna", "Ireland": "Dublin", "Poland": "Warsaw",
    "Hungary": "Budapest", "Belgium": "Brussels", "Denmark": "Copenhagen", "Sweden": "Stockholm",
    "Finland": "Helsinki", "Iceland": "Reykjavik", "Chile": "Santiago", "Colombia": "Bogota",
    "Thailand": "Bangkok", "Vietnam": "Hanoi", "Ecuador": "Quito", "Turkey": "Ankara",
    "Canada": "Ottawa", "Cuba": "Havana", "Ghana": "Accra", "Senegal": "Dakar",
    "Uganda": "Kampala", "Tunisia": "Tunis", "Latvia": "Riga", "Estonia": "Tallinn",
    "Lithuania": "Vilnius", "Bulgaria": "Sofia", "Romania": "Bucharest", "Serbia": "Belgrade",
    "Croatia": "Zagreb", "Georgia": "Tbilisi", "Armenia": "Yerevan", "Mongolia": "Ulaanbaatar",
    "Nepal": "Kathmandu", "Switzerland": "Bern", "Slovakia": "Bratislava",
    "Slovenia": "Ljubljana", "Malta": "Valletta", "Cyprus": "Nicosia", "Qatar": "Doha",
    "Jordan": "Amman", "Lebanon": "Beirut", "Uruguay": "Montevideo", "Paraguay": "Asuncion",
    "Zambia": "Lusaka", "Zimbabwe": "Harare", "Mozambique": "Maputo", "Angola": "Luanda",
    "Namibia": "Windhoek", "Botswana": "Gaborone", "Rwanda": "Kigali", "Netherlands": "Amsterdam",
    "Kazakhstan": "Astana", "Argentina": "Buenos Aires", "Mexico": "Mexico City",
}

FIRST_NAMES = """Alice Bob Carol Dan Erin Frank Grace Henry Irene Jack Karen Liam Maria Noah Olga
Pablo Quinn Rosa Sam Tara Umar Vera Walter Xena Yusuf Zoe Ana Ben Chloe David Elena Felix Gina
Hugo Ines Jonas Kira Luca Mei Nils Omar Paula Rafael Sofia Tomas Uma Victor Wanda Yara Aiko
Bruno Camila Diego Emma Fatima Goran Hana Ivan Julia Kenji Lena Marco Nadia Oscar Priya Ravi
Sara Theo Valentina Wei Zara Amir Bianca Carlos Dalia Emil Freya Gustav Helga Isaac Jana""".split()

LAST_NAMES = """Smith Jones Garcia Silva Chen Wang Kim Lee Patel Khan Novak Rossi Muller Schmidt
Dubois Martin Lopez Perez Costa Santos Ivanova Petrov Nakamura Tanaka Suzuki Ahmed Hassan Ali
Okafor Mensah Larsen Hansen Berg Lindqvist Virtanen Kowalski Nowak Horvat Popescu Papadopoulos
Yilmaz Demir Cohen Levi Murphy Kelly Walsh Brown Taylor Wilson Evans Thomas Moreau Fontaine
Weber Fischer Wagner Becker Jansen Visser Bakker Romano Bianchi Ferrari Moretti Sato Ito Park
Choi Nguyen Tran Pham Singh Gupta Sharma Mehta Reyes Cruz Flores Rivera Torres Vargas Mendoza""".split()

LANGUAGES = """French Spanish German Italian Japanese Portuguese Dutch Swedish Norwegian Danish
Finnish Polish Czech Greek Turkish Arabic Hebrew Hindi Bengali Korean Chinese Vietnamese Thai
Indonesian Swahili Russian Ukrainian Romanian Hungarian Catalan Basque Welsh Irish Icelandic
Estonian Latvian Lithuanian Croatian Serbian Slovak""".split()

CURRENCIES = """USD EUR JPY GBP CHF CAD AUD NZD SEK NOK DKK PLN CZK HUF INR CNY KRW SGD HKD MXN
BRL ARS CLP COP ZAR EGP TRY THB IDR PHP""".split()

WORDS = """apple river garden window paper music coffee forest bridge mountain ocean planet
rocket silver golden green orange purple yellow quiet happy rapid gentle ancient modern
history science language market budget project report meeting invoice party dinner lunch
holiday journey ticket station airport harbor village castle museum library theater concert
festival football tennis chess painting poetry novel recipe bread cheese pasta salad soup
honey pepper garlic lemon cherry mango peanut cookie pancake tomato potato carrot onion
engine battery sensor camera laptop printer keyboard monitor network server cloud backup
database kernel compiler browser robot drone satellite telescope microscope volcano glacier
desert island canyon valley meadow prairie jungle swamp tundra reef lagoon waterfall storm
thunder rainbow sunset sunrise winter summer autumn spring birthday wedding graduation
interview contract lawyer doctor teacher student farmer baker painter singer pilot sailor
nurse chef writer dancer climber runner swimmer cyclist tiger eagle dolphin whale penguin
turtle rabbit horse falcon otter beaver badger lizard spider beetle butterfly sparrow parrot
violin piano guitar trumpet drum flute cello harp bicycle tractor scooter train ferry canoe
lantern candle mirror blanket pillow basket bottle kettle ladder hammer shovel bucket rope
velvet cotton linen wool leather marble granite crystal copper bronze iron steel cedar maple
oak willow pine birch bamboo orchid tulip daisy lily violet jasmine lavender clover fern moss
coral pearl amber jade ruby opal topaz onyx quartz dune cliff pebble stone feather shadow
whisper echo signal pattern puzzle riddle secret treasure harvest orbit comet nebula galaxy
quantum pixel vector matrix tensor neuron protein enzyme molecule atom photon fossil""".split()

DOMAINS = ["example.com", "example.org", "mail.com", "work.net", "school.edu", "post.io"]
EXTENSIONS = ["txt", "md", "csv", "json", "py", "log", "pdf", "png", "yaml", "html"]
DIRS = ["home", "data", "docs", "projects", "tmp", "var", "notes", "src", "reports", "photos"]

_ONSETS = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
           "br", "ch", "dr", "gr", "kr", "pl", "st", "th", "tr", "sh", "qu", "j", "w", "y"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "ei", "ia", "y"]
_CODAS = ["", "", "", "n", "r", "s", "l", "m", "t", "nd", "rk", "st", "x", "ck"]


def pseudo_word(rng: random.Random, min_syl: int = 1, max_syl: int = 4) -> str:
    """A pronounceable made-up word ("Velmora", "trisk")."""
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                   for _ in range(rng.randint(min_syl, max_syl)))


LONG_LISTS = {"v3": 0.25, "v4": 0.6}


class Values:
    """Draws values of one split ("train" or "heldout") from a seeded `random.Random`."""

    def __init__(self, rng: random.Random, split: str, mix: str = "v2") -> None:
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', not {split!r}")
        self.rng, self.split = rng, split
        # the v3 / v4 mixes' changes reach training only: held-out sets stay as they were
        self.v3 = mix in ("v3", "v4") and split == "train"
        # the share of tool requests offered a long tool list (v4: most of them, since
        # where a free-text value ends is what a long prompt blurs most)
        self.long_share = LONG_LISTS.get(mix, 0.0) if split == "train" else 0.0

    def _keep(self, value: str) -> bool:
        return is_heldout(value) == (self.split == "heldout")

    def _draw(self, make) -> str:
        while True:
            value = make()
            if self._keep(value):
                return value

    def _word(self, real: list[str], pseudo_share: float, capital: bool) -> str:
        def make() -> str:
            if self.rng.random() < pseudo_share:
                w = pseudo_word(self.rng, 2, 3)
                return w.capitalize() if capital else w
            return self.rng.choice(real)
        return self._draw(make)

    def city(self) -> str:
        return self._word(CITIES, 0.5 if self.split == "train" else 0.3, True)

    def first_name(self) -> str:
        return self._word(FIRST_NAMES, 0.4 if self.split == "train" else 0.2, True)

    def last_name(self) -> str:
        return self._word(LAST_NAMES, 0.4 if self.split == "train" else 0.2, True)

    def full_name(self) -> str:
        return self._draw(lambda: f"{self.first_name()} {self.last_name()}")

    def word(self) -> str:
        return self._word(WORDS, 0.3 if self.split == "train" else 0.1, False)

    def phrase(self, lo: int = 1, hi: int = 3) -> str:
        """Words (some made up); the v3 mix draws one more at most, so that where a copied
        free-text value ends is read from the request, not from the lengths seen in training."""
        hi += self.v3
        return self._draw(lambda: " ".join(self.rng.choice(WORDS) if self.rng.random() < 0.8
                                           else pseudo_word(self.rng, 1, 3)
                                           for _ in range(self.rng.randint(lo, hi))))

    def language(self) -> str:
        return self._word(LANGUAGES, 0.0, True)

    def currency(self) -> str:
        return self._draw(lambda: self.rng.choice(CURRENCIES) if self.rng.random() < 0.7 else
                          "".join(self.rng.choice("ABCDEFGHIJKLMNOPRSTUVWXYZ") for _ in range(3)))

    def ticker(self) -> str:
        letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        return self._draw(lambda: "".join(self.rng.choice(letters)
                                          for _ in range(self.rng.randint(2, 5))))

    def email(self) -> str:
        def make() -> str:
            user = self.rng.choice([self.rng.choice(FIRST_NAMES).lower(), pseudo_word(self.rng)])
            if self.rng.random() < 0.3:
                user += "." + self.rng.choice(LAST_NAMES).lower()
            return f"{user}@{self.rng.choice(DOMAINS)}"
        return self._draw(make)

    def path(self) -> str:
        def make() -> str:
            parts = [self.rng.choice(DIRS)]
            for _ in range(self.rng.randint(0, 2)):
                parts.append(self.rng.choice([self.rng.choice(WORDS),
                                              self.rng.choice(FIRST_NAMES).lower()]))
            name = self.rng.choice([self.rng.choice(WORDS), pseudo_word(self.rng, 1, 3)])
            if self.rng.random() < 0.3:
                name += "_" + str(self.rng.randint(1, 99))
            return "/" + "/".join(parts) + f"/{name}.{self.rng.choice(EXTENSIONS)}"
        return self._draw(make)

    def integer(self, lo: int = 1, hi: int = 999) -> int:
        return int(self._draw(lambda: str(self.rng.randint(lo, hi))))

    def amount(self) -> int | float:
        def make() -> str:
            if self.rng.random() < 0.7:
                return str(self.rng.choice([self.rng.randint(1, 99), self.rng.randint(100, 9999)]))
            return f"{self.rng.randint(1, 999)}.{self.rng.randint(1, 99):02d}".rstrip("0")
        text = self._draw(make)
        return float(text) if "." in text else int(text)

    def clock(self) -> str:
        return self._draw(lambda: f"{self.rng.randint(0, 23)}:{self.rng.randint(0, 59):02d}")

    def date(self) -> str:
        return self._draw(lambda: f"{self.rng.randint(2024, 2030)}-{self.rng.randint(1, 12):02d}"
                                  f"-{self.rng.randint(1, 28):02d}")
